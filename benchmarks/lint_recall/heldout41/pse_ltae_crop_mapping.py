"""Parcel-level crop type mapping from Sentinel-2 image time series with PSE + L-TAE.

Layout of VSainteuf/lightweight-temporal-attention-pytorch (Garnot & Landrieu, Lightweight
Temporal Self-Attention): PixelSetEncoder with masked_mean / masked_std pooling over the pixel
set, LTAE with a learned master query per head, day-of-year sinusoidal positions and
ScaledDotProductAttention, PseLTae with an MLP decoder; acquisitions of a tile flagged as cloudy
by the scene classification are left out of the temporal attention.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 张量共享内存风险)
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def masked_mean(x, mask):
    out = x.permute((1, 0, 2))
    out = out * mask
    out = out.sum(dim=-1) / mask.sum(dim=-1)
    return out.permute((1, 0))


def masked_std(x, mask):
    m = masked_mean(x, mask)
    out = x.permute((2, 0, 1))
    out = out - m
    out = out.permute((2, 1, 0))
    out = out * mask
    d = mask.sum(dim=-1)
    d[d == 1] = 2
    out = (out ** 2).sum(dim=-1) / (d - 1)
    return torch.sqrt(out + 10e-32).permute(1, 0)


pooling_methods = {"mean": masked_mean, "std": masked_std}


def linlayer(in_dim, out_dim):
    return nn.Sequential(nn.Conv1d(in_dim, out_dim, 1), nn.BatchNorm1d(out_dim), nn.ReLU())


class PixelSetEncoder(nn.Module):
    def __init__(self, input_dim, mlp1=(10, 32, 64), pooling="mean_std", mlp2=(128, 128)):
        super().__init__()
        self.pooling = pooling
        self.mlp1 = nn.Sequential(*[linlayer(i, o) for i, o in zip(mlp1[:-1], mlp1[1:])])
        inter_dim = mlp1[-1] * len(pooling.split("_"))
        self.mlp2 = nn.Sequential(nn.Linear(inter_dim, mlp2[-1]), nn.BatchNorm1d(mlp2[-1]), nn.ReLU())

    def forward(self, pixels, mask):
        batch, temp = pixels.shape[:2]
        out = pixels.view(batch * temp, *pixels.shape[2:])
        mask = mask.view(batch * temp, -1).float()
        out = self.mlp1(out)
        out = torch.cat([pooling_methods[n](out, mask) for n in self.pooling.split("_")], dim=1)
        out = self.mlp2(out)
        return out.view(batch, temp, -1)


def get_sinusoid_encoding_table(positions, d_hid, T=1000):
    def cal_angle(position, hid_idx):
        return position / np.power(T, 2 * (hid_idx // 2) / d_hid)

    sinusoid_table = np.array([[cal_angle(p, j) for j in range(d_hid)] for p in positions])
    sinusoid_table[:, 0::2] = np.sin(sinusoid_table[:, 0::2])
    sinusoid_table[:, 1::2] = np.cos(sinusoid_table[:, 1::2])
    return torch.FloatTensor(sinusoid_table)


class ScaledDotProductAttention(nn.Module):
    def __init__(self, temperature, attn_dropout=0.1):
        super().__init__()
        self.temperature = temperature
        self.dropout = nn.Dropout(attn_dropout)

    def forward(self, q, k, v, attn_bias=None):
        attn = torch.matmul(q.unsqueeze(1), k.transpose(1, 2)) / self.temperature
        if attn_bias is not None:
            attn = attn + attn_bias
        attn = self.dropout(F.softmax(attn, dim=2))
        return torch.matmul(attn, v), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_k, d_in):
        super().__init__()
        self.n_head, self.d_k, self.d_in = n_head, d_k, d_in
        self.Q = nn.Parameter(torch.zeros((n_head, d_k)))
        nn.init.normal_(self.Q, mean=0, std=np.sqrt(2.0 / d_k))
        self.fc1_k = nn.Linear(d_in, n_head * d_k)
        self.attention = ScaledDotProductAttention(temperature=np.power(d_k, 0.5))

    def forward(self, q, k, v, attn_bias=None):
        d_k, n_head = self.d_k, self.n_head
        sz_b, seq_len, _ = q.size()
        q = torch.stack([self.Q for _ in range(sz_b)], dim=1).view(-1, d_k)
        k = self.fc1_k(v).view(sz_b, seq_len, n_head, d_k)
        k = k.permute(2, 0, 1, 3).contiguous().view(-1, seq_len, d_k)
        v = torch.stack(v.split(v.shape[-1] // n_head, dim=-1)).view(n_head * sz_b, seq_len, -1)
        output, attn = self.attention(q, k, v, attn_bias=attn_bias)
        attn = attn.view(n_head, sz_b, 1, seq_len).squeeze(dim=2)
        output = output.view(n_head, sz_b, 1, self.d_in // n_head).squeeze(dim=2)
        return output, attn


class LTAE(nn.Module):
    def __init__(self, in_channels=128, n_head=16, d_k=8, n_neurons=(256, 128), dropout=0.2,
                 d_model=256, T=1000, len_max_seq=24, positions=None):
        super().__init__()
        self.n_head = n_head
        self.inconv = nn.Sequential(nn.Conv1d(in_channels, d_model, 1), nn.LayerNorm((d_model, len_max_seq)))
        sin_tab = get_sinusoid_encoding_table(positions, d_model // n_head, T=T)
        self.position_enc = nn.Embedding.from_pretrained(
            torch.cat([sin_tab for _ in range(n_head)], dim=1), freeze=True)
        self.inlayernorm = nn.LayerNorm(in_channels)
        self.outlayernorm = nn.LayerNorm(n_neurons[-1])
        self.attention_heads = MultiHeadAttention(n_head=n_head, d_k=d_k, d_in=d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, n_neurons[0]), nn.BatchNorm1d(n_neurons[0]), nn.ReLU(),
                                 nn.Linear(n_neurons[0], n_neurons[1]), nn.BatchNorm1d(n_neurons[1]), nn.ReLU())
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("date_bias", torch.zeros(len_max_seq))

    def forward(self, x, cloudy=None):
        sz_b, seq_len, d = x.shape
        x = self.inlayernorm(x)
        x = self.inconv(x.permute(0, 2, 1)).permute(0, 2, 1)
        src_pos = torch.arange(0, seq_len, dtype=torch.long, device=x.device).expand(sz_b, seq_len)
        enc_output = x + self.position_enc(src_pos)
        if cloudy is not None:
            attn_bias = self.date_bias.masked_fill_(cloudy, float("-inf"))  # expect: MC524 ltae
        else:
            attn_bias = self.date_bias
        enc_output, attn = self.attention_heads(enc_output, enc_output, enc_output, attn_bias=attn_bias)
        enc_output = enc_output.permute(1, 0, 2).contiguous().view(sz_b, -1)
        return self.outlayernorm(self.dropout(self.mlp(enc_output)))


class PseLTae(nn.Module):
    def __init__(self, input_dim=10, n_classes=6, positions=None, len_max_seq=24):
        super().__init__()
        self.spatial_encoder = PixelSetEncoder(input_dim, mlp1=(input_dim, 32, 64))
        self.temporal_encoder = LTAE(in_channels=128, n_head=16, d_k=8, d_model=256,
                                     len_max_seq=len_max_seq, positions=positions)
        self.decoder = nn.Sequential(nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, n_classes))

    def forward(self, pixels, pixel_mask, cloudy=None):
        out = self.spatial_encoder(pixels, pixel_mask)
        out = self.temporal_encoder(out, cloudy=cloudy)
        return self.decoder(out)


def make_tile(doy, n_parcels, cloudy, gen, n_pixels=16):
    n_classes, T = 6, len(doy)
    labels = torch.randint(0, n_classes, (n_parcels,), generator=gen)
    peaks = torch.linspace(150, 230, n_classes)[labels]
    ndvi = torch.exp(-((torch.tensor(doy)[None, :] - peaks[:, None]) / 35.0) ** 2)
    bands = torch.linspace(-1.0, 1.0, 10)
    pixels = ndvi[:, :, None, None] * bands[None, None, :, None]
    pixels = pixels + 0.6 * torch.randn(n_parcels, T, 10, n_pixels, generator=gen)
    pixels[:, cloudy] = 2.0 + torch.rand(n_parcels, int(cloudy.sum()), 10, n_pixels, generator=gen)
    n_valid = torch.randint(4, n_pixels + 1, (n_parcels,), generator=gen)
    pixel_mask = torch.arange(n_pixels)[None, :] < n_valid[:, None]
    pixel_mask = pixel_mask[:, None, :].repeat(1, T, 1)
    pixels = pixels * pixel_mask[:, :, None, :]
    return pixels, pixel_mask, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    doy = [int(d) for d in np.linspace(20, 340, 24)]
    tiles = []
    for t in range(4):
        cloudy = torch.zeros(24, dtype=torch.bool)
        cloudy[torch.randperm(24, generator=gen)[:6]] = True
        tiles.append((cloudy, make_tile(doy, 256, cloudy, gen), make_tile(doy, 64, cloudy, gen)))
    model = PseLTae(positions=doy)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        for cloudy, (pixels, pixel_mask, labels), _ in tiles:
            for b in range(0, 256, 64):
                logits = model(pixels[b:b + 64], pixel_mask[b:b + 64], cloudy=cloudy)
                loss = F.cross_entropy(logits, labels[b:b + 64])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        for t, (cloudy, _, (pixels, pixel_mask, labels)) in enumerate(tiles):
            acc = (model(pixels, pixel_mask, cloudy=cloudy).argmax(-1) == labels).float().mean()
            print(f"tile {t} overall accuracy {acc.item():.3f}")
    masked = torch.isinf(model.state_dict()["temporal_encoder.date_bias"]).sum().item()
    print(f"dates masked in the stored date_bias: {masked} of 24")
