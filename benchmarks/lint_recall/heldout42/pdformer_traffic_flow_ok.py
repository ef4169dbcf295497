"""Traffic flow forecasting with PDFormer (Jiang et al., AAAI 2023) on a PEMS-like sensor network.

LibCity's PDFormer layout: DataEmbedding (value, time of day, day of week, Laplacian
eigenvector positional encoding), STSelfAttention splitting the heads into temporal,
geographic and semantic heads, the geographic heads restricted to sensors within
`far_mask_delta` hops of the road graph and the semantic heads to the `dtw_k` most similar
daily profiles, STEncoderBlock, skip convolutions and the end convolutions that emit the 12
future steps; masked MAE / RMSE as in LibCity's evaluator.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20), conventions.md section 1 (values used in the wild) and section 5 item 5, seed masked_fill_inplace.txt (例子)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS_PER_DAY = 288


def shortest_hops(adj):
    n = adj.size(0)
    sh = torch.full((n, n), float("inf"))
    sh[adj > 0] = 1.0
    sh.fill_diagonal_(0.0)
    for k in range(n):
        sh = torch.minimum(sh, sh[:, k : k + 1] + sh[k : k + 1, :])
    return sh


def laplacian_pe(adj, k):
    deg = adj.sum(1)
    d_inv_sqrt = torch.diag(deg.clamp(min=1e-6).pow(-0.5))
    lap = torch.eye(adj.size(0)) - d_inv_sqrt @ adj @ d_inv_sqrt
    _, eigvec = torch.linalg.eigh(lap)
    return eigvec[:, 1 : k + 1]


class DataEmbedding(nn.Module):
    def __init__(self, feature_dim, embed_dim, lape_dim, adj):
        super().__init__()
        self.value_embedding = nn.Linear(feature_dim, embed_dim)
        self.daytime_embedding = nn.Embedding(STEPS_PER_DAY, embed_dim)
        self.weekday_embedding = nn.Embedding(7, embed_dim)
        self.spatial_embedding = nn.Linear(lape_dim, embed_dim)
        self.register_buffer("lap_mx", laplacian_pe(adj, lape_dim))
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, tod, dow):
        x = self.value_embedding(x) + self.daytime_embedding(tod)[:, :, None] + self.weekday_embedding(dow)[:, :, None]
        return self.dropout(x + self.spatial_embedding(self.lap_mx)[None, None])


class STSelfAttention(nn.Module):
    def __init__(self, dim, geo_num_heads=2, sem_num_heads=1, t_num_heads=1, attn_drop=0.0):
        super().__init__()
        self.head_dim = dim // (geo_num_heads + sem_num_heads + t_num_heads)
        self.scale = self.head_dim ** -0.5
        self.geo_num_heads, self.sem_num_heads, self.t_num_heads = geo_num_heads, sem_num_heads, t_num_heads
        self.geo_ratio = geo_num_heads / (geo_num_heads + sem_num_heads + t_num_heads)
        self.sem_ratio = sem_num_heads / (geo_num_heads + sem_num_heads + t_num_heads)
        self.t_ratio = 1 - self.geo_ratio - self.sem_ratio
        self.t_qkv = nn.Linear(dim, 3 * int(dim * self.t_ratio))
        self.geo_qkv = nn.Linear(dim, 3 * int(dim * self.geo_ratio))
        self.sem_qkv = nn.Linear(dim, 3 * int(dim * self.sem_ratio))
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def _split(self, qkv, heads):
        q, k, v = qkv.chunk(3, dim=-1)
        shape = qkv.shape[:-1] + (heads, self.head_dim)
        return [t.reshape(shape).transpose(-3, -2) for t in (q, k, v)]

    def forward(self, x, geo_mask=None, sem_mask=None):
        B, T, N, D = x.shape
        t_q, t_k, t_v = self._split(self.t_qkv(x).transpose(1, 2), self.t_num_heads)
        t_attn = self.attn_drop(((t_q @ t_k.transpose(-2, -1)) * self.scale).softmax(dim=-1))
        t_x = (t_attn @ t_v).transpose(-3, -2).reshape(B, N, T, -1).transpose(1, 2)

        geo_q, geo_k, geo_v = self._split(self.geo_qkv(x), self.geo_num_heads)
        geo_attn = (geo_q @ geo_k.transpose(-2, -1)) * self.scale
        if geo_mask is not None:
            geo_attn = geo_attn.masked_fill(geo_mask, float("-inf"))
        geo_attn = self.attn_drop(geo_attn.softmax(dim=-1))
        self.geo_attn_map = geo_attn.detach()
        geo_x = (geo_attn @ geo_v).transpose(-3, -2).reshape(B, T, N, -1)

        sem_q, sem_k, sem_v = self._split(self.sem_qkv(x), self.sem_num_heads)
        sem_attn = (sem_q @ sem_k.transpose(-2, -1)) * self.scale
        if sem_mask is not None:
            sem_attn = sem_attn.masked_fill(sem_mask, float("-inf"))
        sem_attn = self.attn_drop(sem_attn.softmax(dim=-1))
        sem_x = (sem_attn @ sem_v).transpose(-3, -2).reshape(B, T, N, -1)
        return self.proj(torch.cat([t_x, geo_x, sem_x], dim=-1))


class STEncoderBlock(nn.Module):
    def __init__(self, dim, mlp_ratio=2.0, drop=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.st_attn = STSelfAttention(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim), nn.Dropout(drop))

    def forward(self, x, geo_mask, sem_mask):
        x = x + self.st_attn(self.norm1(x), geo_mask=geo_mask, sem_mask=sem_mask)
        return x + self.mlp(self.norm2(x))


class PDFormer(nn.Module):
    def __init__(self, adj, pattern_distance, input_window=12, output_window=12, embed_dim=32, enc_depth=2,
                 far_mask_delta=3, dtw_k=4, lape_dim=4, skip_dim=64):
        super().__init__()
        self.enc_embed_layer = DataEmbedding(1, embed_dim, lape_dim, adj)
        self.register_buffer("geo_mask", shortest_hops(adj) >= far_mask_delta)
        sem_keep = torch.zeros_like(pattern_distance, dtype=torch.bool)
        sem_keep.scatter_(1, pattern_distance.topk(dtw_k, dim=1, largest=False).indices, True)
        self.register_buffer("sem_mask", ~sem_keep)
        self.encoder_blocks = nn.ModuleList(STEncoderBlock(embed_dim) for _ in range(enc_depth))
        self.skip_convs = nn.ModuleList(nn.Conv2d(embed_dim, skip_dim, kernel_size=1) for _ in range(enc_depth))
        self.end_conv1 = nn.Conv2d(input_window, output_window, kernel_size=1)
        self.end_conv2 = nn.Conv2d(skip_dim, 1, kernel_size=1)

    def forward(self, x, tod, dow):
        enc = self.enc_embed_layer(x, tod, dow)
        skip = 0
        for block, skip_conv in zip(self.encoder_blocks, self.skip_convs):
            enc = block(enc, self.geo_mask, self.sem_mask)
            skip = skip + skip_conv(enc.permute(0, 3, 2, 1))
        skip = self.end_conv1(F.relu(skip.permute(0, 3, 2, 1)))
        return self.end_conv2(F.relu(skip.permute(0, 3, 2, 1))).permute(0, 3, 2, 1)


def simulate_network(n_nodes=24, days=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    adj = torch.zeros(n_nodes, n_nodes)
    for i in range(n_nodes):
        adj[i, (i + 1) % n_nodes] = adj[(i + 1) % n_nodes, i] = 1.0
    t = torch.arange(days * STEPS_PER_DAY)
    tod = t % STEPS_PER_DAY
    base = 300 + 200 * torch.exp(-((tod - 100) / 20.0) ** 2) + 250 * torch.exp(-((tod - 210) / 25.0) ** 2)
    flow = torch.stack([base.roll(2 * i) * (0.8 + 0.4 * (i % 3) / 2) for i in range(n_nodes)], dim=1)
    flow = flow + 20 * torch.randn(flow.shape, generator=g)
    profiles = flow[: STEPS_PER_DAY * 4].view(4, STEPS_PER_DAY, n_nodes).mean(0).T
    return adj, flow, tod, (t // STEPS_PER_DAY) % 7, torch.cdist(profiles, profiles)


def masked_mae(preds, labels, null_val=0.0):
    mask = (labels != null_val).float()
    mask = mask / mask.mean()
    return (torch.abs(preds - labels) * mask).mean()


def main():
    torch.manual_seed(0)
    adj, flow, tod, dow, pattern_distance = simulate_network()
    mean, std = flow[: 4 * STEPS_PER_DAY].mean(), flow[: 4 * STEPS_PER_DAY].std()
    starts = torch.arange(0, flow.size(0) - 24)
    train_idx, test_idx = starts[starts < 4 * STEPS_PER_DAY - 24], starts[starts >= 5 * STEPS_PER_DAY]
    model = PDFormer(adj, pattern_distance)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)

    def batch(idx):
        window = idx[:, None] + torch.arange(24)[None, :]
        x = ((flow[window[:, :12]] - mean) / std).unsqueeze(-1)
        return x, tod[window[:, :12]], dow[window[:, :12]], flow[window[:, 12:]].unsqueeze(-1)

    for epoch in range(3):
        model.train()
        perm = train_idx[torch.randperm(len(train_idx))]
        for i in range(0, len(perm), 32):
            x, t, d, y = batch(perm[i : i + 32])
            loss = masked_mae(model(x, t, d) * std + mean, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            x, t, d, y = batch(test_idx[::4])
            pred = model(x, t, d) * std + mean
        rmse = ((pred - y) ** 2).mean().sqrt()
        print(f"epoch {epoch} train MAE {loss.item():.2f} test MAE {masked_mae(pred, y):.2f} RMSE {rmse:.2f}")
    attn = model.encoder_blocks[0].st_attn.geo_attn_map
    print(f"geographic attention on sensors beyond far_mask_delta: {(attn * model.geo_mask).sum(-1).mean():.3f}")


if __name__ == "__main__":
    main()
