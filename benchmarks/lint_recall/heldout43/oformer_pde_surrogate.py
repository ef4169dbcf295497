"""Operator Transformer (OFormer) surrogate for the 2-D heat equation on scattered observations.

Follows the encoder / decoder split of OFormer (Li, Meidani and Barati Farimani, 2022): an encoder of
self-attention over the observed points of the initial condition, each a (u, x, y) token, and a
point-wise decoder whose query points (random Fourier features of their coordinates) cross-attend
to the encoded input points, followed by a propagator MLP. Every sample has its own number of
sensors (padded per batch); the target is the solution at time T on a 12 x 12 grid, relative L2.

Source: conventions.md §2.6, §1 (nn.MultiheadAttention and SDPA rows) and §5 item 6
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class OFormerConfig:
    in_channels: int = 3
    d_model: int = 64
    n_heads: int = 4
    enc_depth: int = 1
    fourier_scale: float = 2.0
    n_fourier: int = 32
    prop_depth: int = 2
    dropout: float = 0.0


def heat_solution(n_samples, grid=12, nu=0.02, t_final=0.5, g=None):
    ks = torch.tensor([[kx, ky] for kx in range(-2, 3) for ky in range(-2, 3) if (kx, ky) != (0, 0)]).float()
    amp = torch.randn(n_samples, len(ks), generator=g) / (1 + ks.norm(dim=-1)) ** 2
    phase = 2 * math.pi * torch.rand(n_samples, len(ks), generator=g)
    decay = torch.exp(-4 * math.pi ** 2 * nu * t_final * (ks ** 2).sum(-1))

    def field(xy, t_scale, idx):
        arg = 2 * math.pi * xy @ ks.T
        return (amp[idx, None] * t_scale * torch.sin(arg[None] + phase[idx, None])).sum(-1)

    samples = []
    for i in range(n_samples):
        n_obs = int(torch.randint(100, 181, (1,), generator=g))
        xy = torch.rand(n_obs, 2, generator=g)
        samples.append((xy, field(xy, 1.0, [i])[0]))
    lin = (torch.arange(grid) + 0.5) / grid
    grid_xy = torch.stack(torch.meshgrid(lin, lin, indexing="ij"), -1).view(-1, 2)
    targets = field(grid_xy, decay, slice(None))
    return samples, grid_xy, targets


def collate(samples, targets, u_std=1.0):
    lengths = torch.tensor([xy.size(0) for xy, _ in samples])
    n_max = int(lengths.max())
    tokens = torch.zeros(len(samples), n_max, 3)
    for i, (xy, u) in enumerate(samples):
        tokens[i, : xy.size(0), 0], tokens[i, : xy.size(0), 1:] = u / u_std, xy
    input_pad = torch.arange(n_max)[None, :] >= lengths[:, None]
    return tokens, input_pad, targets / u_std


class PreNormAttentionBlock(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ffn = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 2 * d_model), nn.GELU(),
                                 nn.Linear(2 * d_model, d_model))

    def forward(self, x, key_padding_mask):
        h = self.norm(x)
        x = x + self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0]
        return x + self.ffn(x)


class SpatialEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pos_features = GaussianFourierFeatures(2, cfg.n_fourier, cfg.fourier_scale)
        self.to_embedding = nn.Sequential(nn.Linear(cfg.in_channels - 2 + 2 * cfg.n_fourier, cfg.d_model), nn.GELU(),
                                          nn.Linear(cfg.d_model, cfg.d_model))
        self.blocks = nn.ModuleList([PreNormAttentionBlock(cfg.d_model, cfg.n_heads, cfg.dropout)
                                     for _ in range(cfg.enc_depth)])
        self.to_out = nn.LayerNorm(cfg.d_model)

    def forward(self, tokens, input_pad):
        x = self.to_embedding(torch.cat([tokens[..., :1], self.pos_features(tokens[..., 1:])], dim=-1))
        for block in self.blocks:
            x = block(x, input_pad)
        return self.to_out(x)


class GaussianFourierFeatures(nn.Module):
    def __init__(self, in_dim, n_features, scale):
        super().__init__()
        self.register_buffer("B", torch.randn(in_dim, n_features) * scale)

    def forward(self, xy):
        proj = 2 * math.pi * xy @ self.B
        return torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1)


class PointWiseDecoder2D(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.coordinate_projection = nn.Sequential(GaussianFourierFeatures(2, cfg.n_fourier, cfg.fourier_scale),
                                                   nn.Linear(2 * cfg.n_fourier, cfg.d_model), nn.GELU(),
                                                   nn.Linear(cfg.d_model, cfg.d_model))
        self.norm_q, self.norm_kv = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.cross_attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, dropout=cfg.dropout, batch_first=True)
        self.propagator = nn.ModuleList([nn.Sequential(nn.LayerNorm(cfg.d_model), nn.Linear(cfg.d_model, cfg.d_model),
                                                       nn.GELU(), nn.Linear(cfg.d_model, cfg.d_model))
                                         for _ in range(cfg.prop_depth)])
        self.to_out = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model // 2), nn.GELU(), nn.Linear(cfg.d_model // 2, 1))

    def forward(self, query_xy, z, input_pad):
        q = self.coordinate_projection(query_xy)
        h = self.norm_kv(z)
        x = q + self.cross_attn(self.norm_q(q), h, h, attn_mask=input_pad, need_weights=False)[0]  # expect: MC515 oformer
        for layer in self.propagator:
            x = x + layer(x)
        return self.to_out(x).squeeze(-1)


class OFormer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = SpatialEncoder(cfg)
        self.decoder = PointWiseDecoder2D(cfg)

    def forward(self, tokens, input_pad, query_xy):
        z = self.encoder(tokens, input_pad)
        return self.decoder(query_xy.expand(tokens.size(0), -1, -1), z, input_pad)


def relative_l2(pred, target):
    return ((pred - target).norm(dim=-1) / target.norm(dim=-1).clamp(min=1e-8)).mean()


def main():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    samples, grid_xy, targets = heat_solution(700, g=g)
    u_std = torch.cat([u for _, u in samples[:600]]).std()
    model = OFormer(OFormerConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    for epoch in range(14):
        model.train()
        perm = torch.randperm(600).tolist()
        for start in range(0, 600, 16):
            idx = perm[start:start + 16]
            tokens, input_pad, y = collate([samples[i] for i in idx], targets[idx], u_std)
            loss = relative_l2(model(tokens, input_pad, grid_xy[None]), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
        model.eval()
        with torch.no_grad():
            tokens, input_pad, y = collate(samples[600:], targets[600:], u_std)
            test_err = relative_l2(model(tokens, input_pad, grid_xy[None]), y).item()
        print(f"epoch {epoch} train rel-L2 {loss.item():.4f} test rel-L2 {test_err:.4f}")


if __name__ == "__main__":
    main()
