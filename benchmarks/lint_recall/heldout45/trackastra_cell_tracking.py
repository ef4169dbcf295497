"""Trackastra-style linking of cell detections across microscopy frames.

Layout after weigertlab/trackastra (Gallusser and Weigert, ECCV 2024): a `TrackingTransformer`
over all detections of a window of frames, `RelativePositionalAttention` with a learned
`RelativePositionalBias` over time and distance and a spatial cutoff, `EncoderLayer` /
`DecoderLayer`, the association matrix `A` normalised per child over the previous frame, greedy
linking accuracy, and `predict` under CPU bfloat16 autocast as on a workstation without a GPU;
synthetic time-lapse windows of 3-8 migrating nuclei with missed detections.

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19), conventions.md §2.3
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RelativePositionalBias(nn.Module):
    def __init__(self, n_head, cutoff_spatial, cutoff_temporal, n_spatial=16):
        super().__init__()
        self.cutoff_temporal = cutoff_temporal
        self.register_buffer("_spatial_bins", torch.linspace(0, cutoff_spatial, n_spatial - 1))
        self.bias = nn.Parameter(0.1 * torch.randn(2 * cutoff_temporal + 1, n_spatial, n_head))

    def forward(self, coords):
        dt = (coords[..., 0][:, :, None] - coords[..., 0][:, None, :]).round().long()
        idx_t = dt.clamp(-self.cutoff_temporal, self.cutoff_temporal) + self.cutoff_temporal
        idx_s = torch.bucketize(torch.cdist(coords[..., 1:], coords[..., 1:]), self._spatial_bins)
        return self.bias[idx_t, idx_s].permute(0, 3, 1, 2)


class RelativePositionalAttention(nn.Module):
    def __init__(self, embed_dim, n_head, cutoff_spatial, cutoff_temporal, dropout=0.0):
        super().__init__()
        self.n_head, self.cutoff_spatial, self.dropout = n_head, cutoff_spatial, dropout
        self.q_pro = nn.Linear(embed_dim, embed_dim)
        self.k_pro = nn.Linear(embed_dim, embed_dim)
        self.v_pro = nn.Linear(embed_dim, embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.pos_bias = RelativePositionalBias(n_head, cutoff_spatial, cutoff_temporal)

    def forward(self, query, key, value, coords, padding_mask=None):
        B, N, D = query.size()
        q = self.q_pro(query).view(B, N, self.n_head, -1).transpose(1, 2)
        k = self.k_pro(key).view(B, N, self.n_head, -1).transpose(1, 2)
        v = self.v_pro(value).view(B, N, self.n_head, -1).transpose(1, 2)
        attn_bias = self.pos_bias(coords).to(q.dtype)
        attn_mask = torch.zeros_like(attn_bias)
        far = torch.cdist(coords[..., 1:], coords[..., 1:]) > self.cutoff_spatial
        attn_mask = attn_mask.masked_fill(far.unsqueeze(1), torch.finfo(torch.float32).min)  # expect: MC517 autocast
        if padding_mask is not None:
            ignore_mask = torch.logical_or(padding_mask.unsqueeze(1), padding_mask.unsqueeze(2)).unsqueeze(1)
            attn_mask = attn_mask.masked_fill(ignore_mask, torch.finfo(q.dtype).min)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask + attn_bias,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, N, D))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, cutoff_spatial, window, dropout=0.0):
        super().__init__()
        self.attn = RelativePositionalAttention(d_model, nhead, cutoff_spatial, window, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, coords, padding_mask=None):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, coords=coords, padding_mask=padding_mask)
        return x + self.mlp(self.norm2(x))


class DecoderLayer(EncoderLayer):
    def forward(self, x, y, coords, padding_mask=None):
        x = x + self.attn(self.norm1(x), y, y, coords=coords, padding_mask=padding_mask)
        return x + self.mlp(self.norm2(x))


class TrackingTransformer(nn.Module):
    def __init__(self, coord_dim=2, feat_dim=2, d_model=64, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                 window=4, spatial_pos_cutoff=0.3):
        super().__init__()
        self.d_model = d_model
        self.freqs = nn.Parameter(torch.randn(1 + coord_dim, d_model // 8) * 3.0, requires_grad=False)
        self.feat_embed = nn.Linear(feat_dim, d_model // 2)
        self.proj = nn.Linear(2 * (1 + coord_dim) * (d_model // 8) + d_model // 2, d_model)
        self.encoder = nn.ModuleList([EncoderLayer(d_model, nhead, spatial_pos_cutoff, window)
                                      for _ in range(num_encoder_layers)])
        self.decoder = nn.ModuleList([DecoderLayer(d_model, nhead, spatial_pos_cutoff, window)
                                      for _ in range(num_decoder_layers)])
        self.head_x, self.head_y = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def pos_embed(self, coords):
        ang = (coords.unsqueeze(-1) * self.freqs).flatten(-2)
        return torch.cat([torch.sin(ang), torch.cos(ang)], -1)

    def forward(self, coords, features, padding_mask=None):
        x = self.proj(torch.cat([self.pos_embed(coords), self.feat_embed(features)], -1))
        for enc in self.encoder:
            x = enc(x, coords=coords, padding_mask=padding_mask)
        y = x
        for dec in self.decoder:
            y = dec(y, x, coords=coords, padding_mask=padding_mask)
        return torch.einsum("bnd,bmd->bnm", self.head_x(x), self.head_y(y)) / math.sqrt(self.d_model)


def parent_logits(A, coords, padding_mask):
    dt = coords[..., 0][:, None, :] - coords[..., 0][:, :, None]
    candidate = (dt == 1) & ~padding_mask[:, :, None] & ~padding_mask[:, None, :]
    return A.masked_fill(~candidate, torch.finfo(A.dtype).min), candidate


def simulate_window(rng, window=4):
    n = int(rng.integers(3, 9))
    pos, size = rng.uniform(0.1, 0.9, (n, 2)), rng.uniform(0.5, 1.5, n)
    coords, feats, ids = [], [], []
    for t in range(window):
        for i in range(n):
            if rng.random() > 0.1:
                coords.append([t, *pos[i]])
                feats.append([size[i] + rng.normal(0, 0.05), rng.normal(size[i], 0.3)])
                ids.append(i)
        pos = np.clip(pos + rng.normal(0, 0.04, pos.shape), 0, 1)
    coords, ids = np.array(coords, dtype=np.float32), np.array(ids)
    parent = np.full(len(ids), -100)
    for j in range(len(ids)):
        prev = np.where((coords[:, 0] == coords[j, 0] - 1) & (ids == ids[j]))[0]
        if len(prev):
            parent[j] = prev[0]
    return coords, np.array(feats, dtype=np.float32), parent


def collate_windows(items):
    N = max(len(c) for c, _, _ in items)
    coords, feats = torch.zeros(len(items), N, 3), torch.zeros(len(items), N, 2)
    parent, padding_mask = torch.full((len(items), N), -100), torch.ones(len(items), N, dtype=torch.bool)
    for b, (c, f, p) in enumerate(items):
        coords[b, :len(c)], feats[b, :len(c)] = torch.from_numpy(c), torch.from_numpy(f)
        parent[b, :len(c)], padding_mask[b, :len(c)] = torch.from_numpy(p), False
    return coords, feats, parent, padding_mask


def predict(model, batch, amp=False):
    coords, feats, parent, padding_mask = batch
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        logits, candidate = parent_logits(model(coords, feats, padding_mask), coords, padding_mask)
    has_parent = parent >= 0
    return (logits.float().argmax(1) == parent)[has_parent].float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = TrackingTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    test_batch = collate_windows([simulate_window(rng) for _ in range(200)])
    for step in range(200):
        model.train()
        coords, feats, parent, padding_mask = collate_windows([simulate_window(rng) for _ in range(32)])
        logits, candidate = parent_logits(model(coords, feats, padding_mask), coords, padding_mask)
        loss = F.cross_entropy(logits.transpose(1, 2).flatten(0, 1), parent.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: loss {loss.item():.3f}, linking accuracy {predict(model, test_batch):.3f}")
    print(f"float32 linking accuracy {predict(model, test_batch):.3f}")
    print(f"bfloat16 autocast linking accuracy {predict(model, test_batch, amp=True):.3f}")
