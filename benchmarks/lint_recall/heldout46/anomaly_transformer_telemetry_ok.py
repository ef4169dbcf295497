"""Unsupervised anomaly detection in spacecraft telemetry, after the Anomaly Transformer.

Imitates thuml/Anomaly-Transformer (Xu et al., ICLR 2022) on its SMAP / MSL setting (NASA
soil-moisture satellite and Mars rover telemetry): `DataEmbedding` with the circular
`TokenEmbedding` convolution and `PositionalEmbedding`, `AnomalyAttention` returning the
series association and the Gaussian prior association from the learned `sigma` over the
registered `distances`, `AttentionLayer` with `sigma_projection`, `EncoderLayer` / `Encoder`,
`AnomalyTransformer`, `my_kl_loss` and the solver's minimax training (`loss1` / `loss2`),
the association-based anomaly energy, the threshold at the `anormly_ratio` percentile and
the point adjustment before precision / recall / F1. The segment loader here also returns a
bias for the telemetry dropouts (samples the downlink lost, zero-filled after scaling) so
that they are left out of the series association. Channels are synthetic
orbit-periodic signals with spikes and level shifts in the test part.

Source: seed self_attention_mask_guide.txt section 3 (常见误区) and section 7 Q3.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def my_kl_loss(p, q):
    res = p * (torch.log(p + 0.0001) - torch.log(q + 0.0001))
    return torch.mean(torch.sum(res, dim=-1), dim=1)


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        self._mask = torch.triu(torch.ones([B, 1, L, L], dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class AnomalyAttention(nn.Module):
    def __init__(self, win_size, mask_flag=True, scale=None, attention_dropout=0.0, output_attention=False):
        super().__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)
        idx = torch.arange(win_size, dtype=torch.float32)
        self.register_buffer("distances", (idx[:, None] - idx[None, :]).abs())

    def forward(self, queries, keys, values, sigma, attn_mask, gap_bias=None):
        B, L, H, E = queries.shape
        scale = self.scale or 1.0 / math.sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)
            scores = scores.masked_fill(attn_mask.mask, -np.inf)
        if gap_bias is not None:
            scores = scores + gap_bias[:, None, None, :]
        attn = scale * scores
        sigma = sigma.transpose(1, 2)
        window_size = attn.shape[-1]
        sigma = torch.sigmoid(sigma * 5) + 1e-5
        sigma = torch.pow(3, sigma) - 1
        sigma = sigma.unsqueeze(-1).repeat(1, 1, 1, window_size)
        prior = self.distances.unsqueeze(0).unsqueeze(0).repeat(sigma.shape[0], sigma.shape[1], 1, 1)
        prior = 1.0 / (math.sqrt(2 * math.pi) * sigma) * torch.exp(-prior ** 2 / 2 / (sigma ** 2))
        series = self.dropout(torch.softmax(attn, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", series, values)
        return V.contiguous(), series, prior, sigma


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        d_keys = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_keys * n_heads)
        self.sigma_projection = nn.Linear(d_model, n_heads)
        self.out_projection = nn.Linear(d_keys * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask, gap_bias=None):
        B, L, _ = queries.shape
        H = self.n_heads
        sigma = self.sigma_projection(queries).view(B, L, H)
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, L, H, -1)
        values = self.value_projection(values).view(B, L, H, -1)
        out, series, prior, sigma = self.inner_attention(queries, keys, values, sigma, attn_mask, gap_bias)
        return self.out_projection(out.view(B, L, -1)), series, prior, sigma


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, dropout=0.1):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None, gap_bias=None):
        new_x, attn, mask, sigma = self.attention(x, x, x, attn_mask, gap_bias)
        x = x + self.dropout(new_x)
        y = x = self.norm1(x)
        y = self.dropout(F.gelu(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm2(x + y), attn, mask, sigma


class Encoder(nn.Module):
    def __init__(self, attn_layers, norm_layer=None):
        super().__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.norm = norm_layer

    def forward(self, x, attn_mask=None, gap_bias=None):
        series_list, prior_list, sigma_list = [], [], []
        for attn_layer in self.attn_layers:
            x, series, prior, sigma = attn_layer(x, attn_mask=attn_mask, gap_bias=gap_bias)
            series_list.append(series)
            prior_list.append(prior)
            sigma_list.append(sigma)
        return self.norm(x), series_list, prior_list, sigma_list


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.0, max_len=500):
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        return self.dropout(self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2) + self.pe[:, :x.size(1)])


class AnomalyTransformer(nn.Module):
    def __init__(self, win_size, enc_in, c_out, d_model=32, n_heads=4, e_layers=2, d_ff=64, dropout=0.0):
        super().__init__()
        self.embedding = DataEmbedding(enc_in, d_model, dropout)
        self.encoder = Encoder(
            [EncoderLayer(AttentionLayer(AnomalyAttention(win_size, False, attention_dropout=dropout), d_model, n_heads),
                          d_model, d_ff, dropout=dropout) for _ in range(e_layers)],
            norm_layer=nn.LayerNorm(d_model))
        self.projection = nn.Linear(d_model, c_out, bias=True)

    def forward(self, x, gap_bias=None):
        enc_out, series, prior, sigmas = self.encoder(self.embedding(x), gap_bias=gap_bias)
        return self.projection(enc_out), series, prior, sigmas


class SMAPSegLoader(torch.utils.data.Dataset):
    def __init__(self, data, labels, win_size, step, mean, std):
        self.gaps = np.isnan(data).any(axis=1)
        self.data = np.nan_to_num((data - mean) / std).astype(np.float32)
        self.labels = labels
        self.win_size = win_size
        self.step = step

    def __len__(self):
        return (self.data.shape[0] - self.win_size) // self.step + 1

    def __getitem__(self, index):
        index = index * self.step
        window = slice(index, index + self.win_size)
        gap_bias = torch.zeros(self.win_size).masked_fill(torch.from_numpy(self.gaps[window]), float("-inf"))
        return torch.from_numpy(self.data[window]), torch.from_numpy(self.labels[window]), gap_bias


def association_discrepancy(series, prior, win_size, temperature=1.0):
    series_loss, prior_loss = 0.0, 0.0
    for u in range(len(prior)):
        p = prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1, win_size)
        series_loss = series_loss + my_kl_loss(series[u], p.detach()) * temperature
        prior_loss = prior_loss + my_kl_loss(p, series[u].detach()) * temperature
    return series_loss, prior_loss


def simulate_channels(rng, n, channels, anomalies):
    t = np.arange(n)
    data = np.stack([np.sin(2 * np.pi * t / rng.uniform(40, 90) + rng.uniform(0, 6)) for _ in range(channels)], 1)
    data += rng.normal(0, 0.05, data.shape)
    labels = np.zeros(n, dtype=np.float32)
    for _ in range(anomalies):
        start, length = int(rng.integers(50, n - 60)), int(rng.integers(5, 30))
        data[start:start + length, int(rng.integers(channels))] += rng.choice([-1.5, 1.5])
        labels[start:start + length] = 1
    for _ in range(n // 400):
        start = int(rng.integers(0, n - 10))
        data[start:start + int(rng.integers(2, 6))] = np.nan
    return data, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    win_size, k, anormly_ratio = 50, 3, 4.0
    train_x, train_y = simulate_channels(rng, 1500, 6, 0)
    test_x, test_y = simulate_channels(rng, 1000, 6, 6)
    mean, std = np.nanmean(train_x, 0), np.nanstd(train_x, 0)
    train_loader = torch.utils.data.DataLoader(SMAPSegLoader(train_x, train_y, win_size, 5, mean, std), batch_size=32, shuffle=True)
    thre_loader = torch.utils.data.DataLoader(SMAPSegLoader(test_x, test_y, win_size, win_size, mean, std), batch_size=32)
    model = AnomalyTransformer(win_size, 6, 6)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        model.train()
        for input_data, _, gap_bias in train_loader:
            output, series, prior, _ = model(input_data, gap_bias)
            series_loss, prior_loss = association_discrepancy(series, prior, win_size)
            rec_loss = F.mse_loss(output, input_data)
            loss1 = rec_loss - k * series_loss.mean() / len(prior)
            loss2 = rec_loss + k * prior_loss.mean() / len(prior)
            optimizer.zero_grad()
            loss1.backward(retain_graph=True)
            loss2.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: rec loss {rec_loss.item():.4f}")
    model.eval()
    energies, labels = [], []
    with torch.no_grad():
        for input_data, y, gap_bias in thre_loader:
            output, series, prior, _ = model(input_data, gap_bias)
            series_loss, prior_loss = association_discrepancy(series, prior, win_size, temperature=50)
            metric = torch.softmax(-series_loss - prior_loss, dim=-1)
            energies.append((metric * ((input_data - output) ** 2).mean(-1)).reshape(-1).numpy())
            labels.append(y.reshape(-1).numpy())
    energy, gt = np.concatenate(energies), np.concatenate(labels)
    thresh = np.percentile(energy, 100 - anormly_ratio)
    pred = (energy > thresh).astype(int)
    for i in range(len(gt)):
        if gt[i] == 1 and pred[i] == 1:
            j = i
            while j >= 0 and gt[j] == 1:
                pred[j] = 1
                j -= 1
            j = i
            while j < len(gt) and gt[j] == 1:
                pred[j] = 1
                j += 1
    tp = int(((pred == 1) & (gt == 1)).sum())
    precision = tp / max(int(pred.sum()), 1)
    recall = tp / max(int(gt.sum()), 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-8)
    print(f"Threshold: {thresh:.6f}  Precision: {precision:.4f}  Recall: {recall:.4f}  F-score: {f1:.4f}")
