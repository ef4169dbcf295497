"""STTN: spatial-temporal transformer networks for traffic speed forecasting.

Written in the layout of xumingxingsjtu/STTN (`SSelfAttention`, `STransformer` with the
spatial embedding of the road graph, `TTransformer` with the temporal embedding `D_T`,
`STTransformerBlock`, `Encoder`, `Transformer`, `STTNSNet` mapping `T_dim` input steps to
`output_T_dim` forecasts), batched, with the spatial attention restricted to the thresholded
road-graph neighbourhood, and the METR-LA data conventions of DCRNN and Graph WaveNet
(`get_adjacency_matrix` with the Gaussian kernel and `normalized_k`, `StandardScaler`,
zero readings meaning a missing value, `masked_mae` with `null_val=0.0`), on a synthetic
ring-road sensor network with detector outages.

Source: seed masked_fill_inplace.txt (注意); conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


def get_adjacency_matrix(distances, sensor_ids, normalized_k=0.1):
    num_sensors = len(sensor_ids)
    dist_mx = np.full((num_sensors, num_sensors), np.inf, dtype=np.float32)
    sensor_id_to_ind = {sensor_id: i for i, sensor_id in enumerate(sensor_ids)}
    for src, dst, dist in distances:
        if src not in sensor_id_to_ind or dst not in sensor_id_to_ind:
            continue
        dist_mx[sensor_id_to_ind[src], sensor_id_to_ind[dst]] = dist
    std = dist_mx[~np.isinf(dist_mx)].flatten().std()
    adj_mx = np.exp(-np.square(dist_mx / std))
    adj_mx[adj_mx < normalized_k] = 0
    return sensor_ids, sensor_id_to_ind, adj_mx


def build_spatial_bias(adj_mx):
    adj = torch.as_tensor(adj_mx, dtype=torch.float32)
    bias = torch.zeros_like(adj).masked_fill(adj == 0, float("-inf"))
    return bias.fill_diagonal_(0.0)


class StandardScaler:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return data * self.std + self.mean


def masked_mae(preds, labels, null_val=np.nan):
    if np.isnan(null_val):
        mask = ~torch.isnan(labels)
    else:
        mask = labels != null_val
    mask = mask.float()
    mask /= torch.mean(mask)
    mask = torch.where(torch.isnan(mask), torch.zeros_like(mask), mask)
    loss = torch.abs(preds - labels) * mask
    loss = torch.where(torch.isnan(loss), torch.zeros_like(loss), loss)
    return torch.mean(loss)


class SSelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size, self.heads = embed_size, heads
        self.per_dim = embed_size // heads
        self.values = nn.Linear(self.per_dim, self.per_dim, bias=False)
        self.keys = nn.Linear(self.per_dim, self.per_dim, bias=False)
        self.queries = nn.Linear(self.per_dim, self.per_dim, bias=False)
        self.fc = nn.Linear(heads * self.per_dim, embed_size)

    def forward(self, values, keys, query, spatial_bias):
        B, N, T, C = query.shape
        values = self.values(values.reshape(B, N, T, self.heads, self.per_dim))
        keys = self.keys(keys.reshape(B, N, T, self.heads, self.per_dim))
        queries = self.queries(query.reshape(B, N, T, self.heads, self.per_dim))
        energy = torch.einsum("bqthd,bkthd->bthqk", [queries, keys]) / (self.embed_size**0.5)
        attention = torch.softmax(energy + spatial_bias, dim=-1)
        out = torch.einsum("bthqk,bkthd->bqthd", [attention, values]).reshape(B, N, T, C)
        return self.fc(out)


class TSelfAttention(SSelfAttention):
    def forward(self, values, keys, query):
        B, N, T, C = query.shape
        values = self.values(values.reshape(B, N, T, self.heads, self.per_dim))
        keys = self.keys(keys.reshape(B, N, T, self.heads, self.per_dim))
        queries = self.queries(query.reshape(B, N, T, self.heads, self.per_dim))
        energy = torch.einsum("bnqhd,bnkhd->bnhqk", [queries, keys]) / (self.embed_size**0.5)
        attention = torch.softmax(energy, dim=-1)
        out = torch.einsum("bnhqk,bnkhd->bnqhd", [attention, values]).reshape(B, N, T, C)
        return self.fc(out)


class STransformer(nn.Module):
    def __init__(self, embed_size, heads, adj_mx, dropout, forward_expansion):
        super().__init__()
        self.register_buffer("D_S", torch.as_tensor(adj_mx, dtype=torch.float32))
        self.register_buffer("adj_bias", build_spatial_bias(adj_mx))
        self.embed_liner = nn.Linear(adj_mx.shape[0], embed_size)
        self.attention = SSelfAttention(embed_size, heads)
        self.norm1, self.norm2 = nn.LayerNorm(embed_size), nn.LayerNorm(embed_size)
        self.feed_forward = nn.Sequential(
            nn.Linear(embed_size, forward_expansion * embed_size),
            nn.ReLU(),
            nn.Linear(forward_expansion * embed_size, embed_size),
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, value, key, query, node_available=None):
        B, N, T, C = query.shape
        D_S = self.embed_liner(self.D_S)[None, :, None, :]
        query = query + D_S
        spatial_bias = self.adj_bias
        if node_available is not None:
            eye = torch.eye(N, dtype=torch.bool, device=query.device)
            dead_keys = ~node_available[None, :] & ~eye
            spatial_bias = self.adj_bias.masked_fill_(dead_keys, float("-inf"))  # expect: MC524 traffic
        attention = self.attention(query, query, query, spatial_bias)
        x = self.dropout(self.norm1(attention + query))
        return self.dropout(self.norm2(self.feed_forward(x) + x))


class TTransformer(nn.Module):
    def __init__(self, embed_size, heads, time_num, dropout, forward_expansion):
        super().__init__()
        self.D_T = nn.Embedding(time_num, embed_size)
        self.attention = TSelfAttention(embed_size, heads)
        self.norm1, self.norm2 = nn.LayerNorm(embed_size), nn.LayerNorm(embed_size)
        self.feed_forward = nn.Sequential(
            nn.Linear(embed_size, forward_expansion * embed_size),
            nn.ReLU(),
            nn.Linear(forward_expansion * embed_size, embed_size),
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, value, key, query, t):
        B, N, T, C = query.shape
        query = query + self.D_T(
            torch.arange(t, t + T, device=query.device) % self.D_T.num_embeddings
        )
        attention = self.attention(query, query, query)
        x = self.dropout(self.norm1(attention + query))
        return self.dropout(self.norm2(self.feed_forward(x) + x))


class STTransformerBlock(nn.Module):
    def __init__(self, embed_size, heads, adj_mx, time_num, dropout, forward_expansion):
        super().__init__()
        self.STransformer = STransformer(embed_size, heads, adj_mx, dropout, forward_expansion)
        self.TTransformer = TTransformer(embed_size, heads, time_num, dropout, forward_expansion)
        self.norm1, self.norm2 = nn.LayerNorm(embed_size), nn.LayerNorm(embed_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, value, key, query, t, node_available=None):
        x1 = self.norm1(self.STransformer(value, key, query, node_available) + query)
        return self.dropout(self.norm2(self.TTransformer(x1, x1, x1, t) + x1))


@dataclass
class STTNConfig:
    in_channels: int = 2
    embed_size: int = 32
    time_num: int = 288
    num_layers: int = 2
    T_dim: int = 12
    output_T_dim: int = 12
    heads: int = 2
    dropout: float = 0.0
    forward_expansion: int = 2


class STTNSNet(nn.Module):
    def __init__(self, adj_mx, cfg: STTNConfig):
        super().__init__()
        self.conv1 = nn.Conv2d(cfg.in_channels, cfg.embed_size, 1)
        self.layers = nn.ModuleList(
            STTransformerBlock(
                cfg.embed_size, cfg.heads, adj_mx, cfg.time_num, cfg.dropout, cfg.forward_expansion
            )
            for _ in range(cfg.num_layers)
        )
        self.conv2 = nn.Conv2d(cfg.T_dim, cfg.output_T_dim, 1)
        self.conv3 = nn.Conv2d(cfg.embed_size, 1, 1)
        self.relu = nn.ReLU()

    def forward(self, x, t, node_available=None):
        x = self.conv1(x.permute(0, 3, 2, 1)).permute(0, 2, 3, 1)
        for layer in self.layers:
            x = layer(x, x, x, t, node_available=node_available)
        out = self.relu(self.conv2(x.permute(0, 2, 1, 3)))
        return self.conv3(out.permute(0, 3, 2, 1)).squeeze(1).permute(0, 2, 1)


def synthetic_ring_road(num_nodes=12, steps=2016, seed=0):
    rng = np.random.default_rng(seed)
    tod = (np.arange(steps) % 288) / 288
    rush = np.exp(-((tod - 0.33) ** 2) / 0.003) + np.exp(-((tod - 0.72) ** 2) / 0.004)
    speed = 65 - 25 * rush[:, None] * rng.uniform(0.6, 1.2, num_nodes)[None, :]
    speed = speed + np.roll(speed, 1, axis=1) * 0.1 - 6.5 + rng.normal(0, 1.5, speed.shape)
    for node, start in [(3, 400), (7, 900), (10, 1300)]:
        speed[start : start + 250, node] = 0.0
    hops = {0: 0.0, 1: 0.5, 2: 0.7, 3: 2.0}
    distances = [
        (f"s{i}", f"s{(i + d) % num_nodes}", hops[abs(d)])
        for i in range(num_nodes)
        for d in range(-3, 4)
    ]
    return speed.astype(np.float32), tod.astype(np.float32), distances


def make_batch(speed, tod, start, batch_size, scaler, cfg: STTNConfig):
    idx = start + np.arange(batch_size)[:, None] + np.arange(cfg.T_dim)[None, :]
    raw = torch.from_numpy(speed[idx])
    x = torch.stack(
        [scaler.transform(raw), torch.from_numpy(tod[idx])[:, :, None].expand_as(raw)], -1
    )
    return {
        "x": x,
        "t": int(start % cfg.time_num),
        "node_available": (raw != 0).any(dim=0).any(dim=0),
        "y": torch.from_numpy(speed[idx + cfg.T_dim]),
    }


def main():
    torch.manual_seed(0)
    cfg = STTNConfig()
    speed, tod, distances = synthetic_ring_road()
    _, _, adj_mx = get_adjacency_matrix(distances, [f"s{i}" for i in range(speed.shape[1])])
    scaler = StandardScaler(mean=speed[:1400].mean(), std=speed[:1400].std())
    model = STTNSNet(adj_mx, cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    for step in range(60):
        batch = make_batch(speed, tod, int(rng.integers(0, 1350)), 16, scaler, cfg)
        y = batch.pop("y")
        loss = masked_mae(scaler.inverse_transform(model(**batch)), y, 0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} masked MAE {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        batch = make_batch(speed, tod, 1500, 64, scaler, cfg)
        y = batch.pop("y")
        mae = masked_mae(scaler.inverse_transform(model(**batch)), y, 0.0).item()
        fresh = STTNSNet(adj_mx, cfg).eval()
        before = fresh(**batch)
        outage = make_batch(speed, tod, 920, 16, scaler, cfg)
        outage.pop("y")
        fresh(**outage)
        drift = (fresh(**batch) - before).abs().max().item()
    stored = model.state_dict()["layers.0.STransformer.adj_bias"].isinf().sum().item()
    built = build_spatial_bias(adj_mx).isinf().sum().item()
    print(f"test masked MAE {mae:.3f}; masked pairs stored {stored}, built {built}")
    print(f"same batch before / after an outage batch: {drift:.2e}")


if __name__ == "__main__":
    main()
