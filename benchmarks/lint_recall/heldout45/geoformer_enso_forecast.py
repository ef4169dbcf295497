"""Geoformer-style ENSO forecasting from upper-ocean temperature fields.

Layout after the 3D-Geoformer code of Zhou and Zhang (Sci. Adv. 9, eadf2827, 2023): a `mypara`
settings object, `make_embedding` with temporal and spatial position embeddings,
`unfold_StackOverChannel` / `fold_tensor` patching, `T_attention` over months and `S_attention`
over patches in `miniEncoder` / `miniDecoder`, `make_mask_matrix`, autoregressive decoding of the
lead months, pretrained on CMIP-like simulations and fine-tuned on a SODA-like reanalysis whose
land-sea mask differs, scored by the Nino3.4 correlation per lead.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合)
"""

import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mypara:
    def __init__(self):
        pass


mypara = Mypara()
mypara.input_channel = 2
mypara.input_length, mypara.output_length = 6, 6
mypara.H, mypara.W, mypara.H0, mypara.W0 = 12, 24, 4, 6
mypara.patch_size, mypara.emb_spatial_size = (3, 4), 24
mypara.d_size, mypara.nheads, mypara.dim_feedforward = 48, 4, 96
mypara.dropout, mypara.num_encoder_layers, mypara.num_decoder_layers = 0.1, 2, 2
mypara.batch_size_train = 16
mypara.nino_lat, mypara.nino_lon = slice(4, 8), slice(12, 20)


def unfold_StackOverChannel(img, kernel_size):
    pt = img.unfold(-2, size=kernel_size[0], step=kernel_size[0])
    pt = pt.unfold(-2, size=kernel_size[1], step=kernel_size[1]).flatten(-2)
    return pt.permute(0, 1, 2, 5, 3, 4).flatten(2, 3)


def fold_tensor(tensor, output_size, kernel_size):
    B, T, cube, H0, W0 = tensor.shape
    f = tensor.flatten(0, 1).reshape(B * T, cube, H0 * W0)
    folded = F.fold(f, output_size=output_size, kernel_size=kernel_size, stride=kernel_size)
    return folded.reshape(B, T, -1, *output_size)


class make_embedding(nn.Module):
    def __init__(self, cube_dim, d_size, emb_spatial_size, max_len):
        super().__init__()
        pe = torch.zeros(max_len, d_size)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_size, 2) * -(math.log(10000.0) / d_size))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe_time", pe[None, None])
        self.register_buffer("spatial_pos", torch.arange(emb_spatial_size)[None, :, None])
        self.emb_space = nn.Embedding(emb_spatial_size, d_size)
        self.linear = nn.Linear(cube_dim, d_size)
        self.norm = nn.LayerNorm(d_size)

    def forward(self, x):
        x = self.linear(x) + self.pe_time[:, :, :x.size(2)] + self.emb_space(self.spatial_pos)
        return self.norm(x)


def T_attention(query, key, value, mask=None, dropout=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    if mask is not None:
        assert mask.dtype == torch.bool and mask.dim() == 2
        scores = scores.masked_fill(mask[None, None, None], float("-inf"))
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value)


def S_attention(query, key, value, attn_bias=None, dropout=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    if attn_bias is not None:
        scores = scores + attn_bias
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value)


class make_attention(nn.Module):
    def __init__(self, d_size, nheads, dropout, over_space):
        super().__init__()
        self.d_k, self.nheads, self.over_space = d_size // nheads, nheads, over_space
        self.linears = nn.ModuleList([nn.Linear(d_size, d_size) for _ in range(4)])
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        B, S = query.size(0), query.size(1)
        q, k, v = [lin(x).view(B, S, x.size(2), self.nheads, self.d_k).permute(0, 3, 1, 2, 4)
                   for lin, x in zip(self.linears, (query, key, value))]
        if self.over_space:
            x = S_attention(q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3), mask, self.dropout)
            x = x.transpose(2, 3)
        else:
            x = T_attention(q, k, v, mask, self.dropout)
        return self.linears[-1](x.permute(0, 2, 3, 1, 4).flatten(3))


class miniEncoder(nn.Module):
    def __init__(self, d_size, nheads, dim_feedforward, dropout):
        super().__init__()
        self.time_attn = make_attention(d_size, nheads, dropout, over_space=False)
        self.space_attn = make_attention(d_size, nheads, dropout, over_space=True)
        self.norms = nn.ModuleList([nn.LayerNorm(d_size) for _ in range(3)])
        self.FC = nn.Sequential(nn.Linear(d_size, dim_feedforward), nn.ReLU(), nn.Linear(dim_feedforward, d_size))

    def forward(self, x, land_bias):
        x = self.norms[0](x + self.time_attn(x, x, x))
        x = self.norms[1](x + self.space_attn(x, x, x, land_bias))
        return self.norms[2](x + self.FC(x))


class miniDecoder(nn.Module):
    def __init__(self, d_size, nheads, dim_feedforward, dropout):
        super().__init__()
        self.time_attn = make_attention(d_size, nheads, dropout, over_space=False)
        self.space_attn = make_attention(d_size, nheads, dropout, over_space=True)
        self.cross_attn = make_attention(d_size, nheads, dropout, over_space=False)
        self.norms = nn.ModuleList([nn.LayerNorm(d_size) for _ in range(4)])
        self.FC = nn.Sequential(nn.Linear(d_size, dim_feedforward), nn.ReLU(), nn.Linear(dim_feedforward, d_size))

    def forward(self, x, en_out, out_mask, land_bias):
        x = self.norms[0](x + self.time_attn(x, x, x, out_mask))
        x = self.norms[1](x + self.space_attn(x, x, x, land_bias))
        x = self.norms[2](x + self.cross_attn(x, en_out, en_out))
        return self.norms[3](x + self.FC(x))


class Geoformer(nn.Module):
    def __init__(self, mypara):
        super().__init__()
        self.mypara = mypara
        self.cube_dim = mypara.input_channel * mypara.patch_size[0] * mypara.patch_size[1]
        self.predictor_emb = make_embedding(self.cube_dim, mypara.d_size, mypara.emb_spatial_size, mypara.input_length)
        self.predictand_emb = make_embedding(self.cube_dim, mypara.d_size, mypara.emb_spatial_size, mypara.output_length)
        args = (mypara.d_size, mypara.nheads, mypara.dim_feedforward, mypara.dropout)
        self.encoder = nn.ModuleList([miniEncoder(*args) for _ in range(mypara.num_encoder_layers)])
        self.decoder = nn.ModuleList([miniDecoder(*args) for _ in range(mypara.num_decoder_layers)])
        self.linear_output = nn.Linear(mypara.d_size, self.cube_dim)
        self.register_buffer("land_bias", torch.zeros(1, mypara.emb_spatial_size))

    def forward(self, predictor, predictand, sea_keep, train=True):
        land_bias = self.land_bias.masked_fill_(~sea_keep, float("-inf"))  # expect: MC524 buffer
        en_out = self.encode(predictor, land_bias)
        if train:
            connect_inout = torch.cat([predictor[:, -1:], predictand[:, :-1]], dim=1)
            out_mask = self.make_mask_matrix(connect_inout.size(1))
            return self.decode(connect_inout, en_out, out_mask, land_bias)
        predictand = predictor[:, -1:]
        for t in range(self.mypara.output_length):
            out_mask = self.make_mask_matrix(predictand.size(1))
            outvar_pred = self.decode(predictand, en_out, out_mask, land_bias)
            predictand = torch.cat([predictand, outvar_pred[:, -1:]], dim=1)
        return outvar_pred

    def to_tokens(self, x):
        x = unfold_StackOverChannel(x, self.mypara.patch_size)
        return x.reshape(x.size(0), x.size(1), self.cube_dim, -1).permute(0, 3, 1, 2)

    def encode(self, predictor, land_bias):
        en_out = self.predictor_emb(self.to_tokens(predictor))
        for layer in self.encoder:
            en_out = layer(en_out, land_bias)
        return en_out

    def decode(self, predictand, en_out, out_mask, land_bias):
        x = self.predictand_emb(self.to_tokens(predictand))
        for layer in self.decoder:
            x = layer(x, en_out, out_mask, land_bias)
        x = self.linear_output(x).permute(0, 2, 3, 1)
        x = x.reshape(x.size(0), x.size(1), self.cube_dim, self.mypara.H0, self.mypara.W0)
        return fold_tensor(x, (self.mypara.H, self.mypara.W), self.mypara.patch_size)

    def make_mask_matrix(self, sz):
        return torch.triu(torch.ones(sz, sz, dtype=torch.bool), diagonal=1)


def make_source(n_months, land_patches, rng):
    yy, xx = np.meshgrid(np.arange(12), np.arange(24), indexing="ij")
    p_east = np.exp(-((yy - 5.5) ** 2) / 8 - ((xx - 16) ** 2) / 18)
    p_west = np.exp(-((yy - 5.5) ** 2) / 8 - ((xx - 5) ** 2) / 12)
    sst, heat = np.zeros(n_months), np.zeros(n_months)
    for t in range(1, n_months):
        sst[t] = 0.88 * sst[t - 1] + 0.32 * heat[t - 1] + rng.normal(0, 0.3)
        heat[t] = 0.92 * heat[t - 1] - 0.30 * sst[t - 1] + rng.normal(0, 0.3)
    field = np.stack([sst[:, None, None] * p_east, heat[:, None, None] * p_west - 0.4 * sst[:, None, None] * p_east], 1)
    field = field + rng.normal(0, 0.15, size=field.shape)
    sea_keep = np.ones(24, dtype=bool)
    sea_keep[land_patches] = False
    sea_grid = np.repeat(np.repeat(sea_keep.reshape(4, 6), 3, 0), 4, 1)
    field = field * sea_grid
    return torch.tensor(field, dtype=torch.float32), torch.from_numpy(sea_keep), torch.tensor(sea_grid, dtype=torch.float32)


def windows(field, start, stop):
    idx = torch.arange(start, stop - 12)
    x = torch.stack([field[i:i + 6] for i in idx])
    y = torch.stack([field[i + 6:i + 12] for i in idx])
    return x, y


def nino34(x):
    return x[:, :, 0, mypara.nino_lat, mypara.nino_lon].mean(dim=(-1, -2))


def fit(model, field, sea_keep, sea_grid, epochs, lr):
    x, y = windows(field, 0, len(field))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(x))
        for i in range(0, len(x), mypara.batch_size_train):
            idx = perm[i:i + mypara.batch_size_train]
            pred = model(x[idx], y[idx], sea_keep, train=True)
            loss = (((pred - y[idx]) ** 2) * sea_grid).sum() / (sea_grid.sum() * pred.size(0) * pred.size(1) * 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cmip, cmip_keep, cmip_grid = make_source(700, [0, 6, 7, 12, 13, 18, 23], rng)
    soda, soda_keep, soda_grid = make_source(700, [0, 23], rng)
    model = Geoformer(mypara)
    print(f"CMIP pretraining loss {fit(model, cmip, cmip_keep, cmip_grid, 2, 1e-3):.4f}")
    state = copy.deepcopy(model.state_dict())
    print(f"land patches in the saved land_bias: {int(torch.isinf(state['land_bias']).sum())}")
    print(f"SODA fine-tuning loss {fit(model, soda[:500], soda_keep, soda_grid, 4, 5e-4):.4f}")
    x, y = windows(soda, 500, 700)
    model.eval()
    with torch.no_grad():
        pred = model(x, y, soda_keep, train=False)
    obs, fc = nino34(y), nino34(pred)
    corr = [np.corrcoef(obs[:, t].numpy(), fc[:, t].numpy())[0, 1] for t in range(6)]
    print("Nino3.4 correlation per lead month:", " ".join(f"{c:.2f}" for c in corr))
    print(f"SODA land patches: {int((~soda_keep).sum())}, masked in land_bias after SODA: {int(torch.isinf(model.land_bias).sum())}")
