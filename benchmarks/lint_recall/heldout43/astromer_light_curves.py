"""Astromer-style self-supervised encoder for irregularly sampled variable-star light curves.

Follows the Astromer recipe (Donoso-Oliva et al. 2023, astromer-science): windows of up to 100
observations with zero-mean magnitudes, a sinusoidal positional encoder on the observation times
(MJD) rather than on indices, BERT-like probing of 50 % of the observations (10 % of them replaced by
a random magnitude, 10 % left as they are, the rest hidden from attention), a masked RMSE
reconstruction loss, then a fine-tuned classifier over five variability classes.

Source: conventions.md §1 (HF 4.x AttentionMaskConverter row), huggingface/transformers#32195 (conventions.md §3 item 25), seed self_attention_mask_guide.txt §7 Q5
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["RRab", "Cepheid", "EclipsingBinary", "LPV", "NonVariable"]
MAX_OBS = 100


def synth_light_curve(label, g):
    n = int(torch.randint(20, MAX_OBS + 1, (1,), generator=g))
    mjd = torch.sort(torch.rand(n, generator=g) * 300.0).values
    u = torch.rand(3, generator=g)
    if label == 0:
        phase = (mjd / (0.4 + 0.4 * u[0])) % 1.0
        mag = 0.8 * (phase - 0.5) * (phase > 0.15).float() - 0.8 * phase * (phase <= 0.15).float() / 0.15 * 0.5
    elif label == 1:
        mag = 0.5 * torch.sin(2 * math.pi * mjd / (2 + 8 * u[0])) ** 3
    elif label == 2:
        phase = (mjd / (0.8 + 2 * u[0])) % 1.0
        mag = 0.9 * torch.exp(-((phase - 0.25) / 0.04) ** 2) + 0.5 * torch.exp(-((phase - 0.75) / 0.04) ** 2)
    elif label == 3:
        mag = 1.5 * torch.sin(2 * math.pi * mjd / (100 + 200 * u[0]) + 6 * u[1])
    else:
        mag = torch.zeros(n)
    err = 0.02 + 0.05 * torch.rand(n, generator=g)
    return mjd, mag + err * torch.randn(n, generator=g), err


def pad_batch(curves):
    lengths = torch.tensor([len(c[0]) for c in curves])
    times, mags = torch.zeros(len(curves), MAX_OBS), torch.zeros(len(curves), MAX_OBS)
    for i, (t, m, _) in enumerate(curves):
        times[i, : len(t)] = t - t[0]
        mags[i, : len(m)] = m - m.mean()
    return times, mags, lengths


def get_padding_mask(lengths, max_len=MAX_OBS):
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def get_probed(valid, probed_frac=0.5, rand_frac=0.1, same_frac=0.1):
    u = torch.rand(valid.shape, device=valid.device)
    probed = valid & (u < probed_frac)
    r = torch.rand(valid.shape, device=valid.device)
    replaced = probed & (r < rand_frac)
    same = probed & (r >= rand_frac) & (r < rand_frac + same_frac)
    return probed, replaced, probed & ~replaced & ~same


class PositionalEncoder(nn.Module):
    def __init__(self, d_model, base=1000.0):
        super().__init__()
        self.register_buffer("freqs", 1.0 / base ** (torch.arange(0, d_model, 2).float() / d_model))

    def forward(self, times):
        angles = times[..., None] * self.freqs
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.depth = num_heads, d_model // num_heads
        self.wq, self.wk, self.wv = (nn.Linear(d_model, d_model) for _ in range(3))
        self.dense = nn.Linear(d_model, d_model)

    def split_heads(self, x):
        return x.view(x.size(0), -1, self.num_heads, self.depth).transpose(1, 2)

    def forward(self, x, attn_bias):
        q, k, v = self.split_heads(self.wq(x)), self.split_heads(self.wk(x)), self.split_heads(self.wv(x))
        logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.depth) + attn_bias
        out = torch.matmul(F.softmax(logits, dim=-1), v)
        return self.dense(out.transpose(1, 2).reshape(x.shape))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, dff, rate=0.1):
        super().__init__()
        self.mha = MultiHeadAttention(d_model, num_heads)
        self.ffn = nn.Sequential(nn.Linear(d_model, dff), nn.Tanh(), nn.Linear(dff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=1e-6), nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(rate)

    def forward(self, x, attn_bias):
        x = self.norm1(x + self.dropout(self.mha(x, attn_bias)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class Astromer(nn.Module):
    def __init__(self, d_model=64, num_heads=4, num_layers=2, dff=128):
        super().__init__()
        self.inp_transform = nn.Linear(1, d_model)
        self.pe = PositionalEncoder(d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, dff) for _ in range(num_layers)])
        self.regressor = nn.Linear(d_model, 1)

    def encode(self, times, mags, keep):
        x = self.inp_transform(mags[..., None]) + self.pe(times)
        attn_bias = (1 - keep[:, None, None, :]) * torch.finfo(x.dtype).min  # expect: MC512 astromer
        for layer in self.layers:
            x = layer(x, attn_bias)
        return x

    def forward(self, times, mags, valid):
        probed, replaced, hidden = get_probed(valid)
        mags_in = torch.where(replaced, torch.randn_like(mags) * mags.std(), mags.masked_fill(hidden, 0.0))
        recon = self.regressor(self.encode(times, mags_in, valid & ~hidden)).squeeze(-1)
        return torch.sqrt(((recon - mags) ** 2)[probed].mean())


class LightCurveClassifier(nn.Module):
    def __init__(self, encoder, d_model=64, n_classes=len(CLASSES)):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Linear(d_model, 64), nn.ReLU(), nn.Linear(64, n_classes))

    def forward(self, times, mags, valid):
        z = self.encoder.encode(times, mags, valid)
        w = valid[..., None].float()
        return self.head((z * w).sum(1) / w.sum(1))


def main():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    labels = torch.randint(len(CLASSES), (2000,), generator=g)
    curves = [synth_light_curve(int(y), g) for y in labels]
    times, mags, lengths = pad_batch(curves)
    valid = get_padding_mask(lengths)
    model = Astromer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(150):
        idx = torch.randint(1600, (64,))
        loss = model(times[idx], mags[idx], valid[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"pretrain step {step} rmse {loss.item():.3f}")
    clf = LightCurveClassifier(model)
    params = [{"params": clf.head.parameters()}, {"params": model.parameters(), "lr": 3e-4}]
    optimizer = torch.optim.Adam(params, lr=2e-3)
    for step in range(150):
        idx = torch.randint(1600, (64,))
        loss = F.cross_entropy(clf(times[idx], mags[idx], valid[idx]), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    clf.eval()
    with torch.no_grad():
        pred = clf(times[1600:], mags[1600:], valid[1600:]).argmax(-1)
    print(f"test accuracy {(pred == labels[1600:]).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
