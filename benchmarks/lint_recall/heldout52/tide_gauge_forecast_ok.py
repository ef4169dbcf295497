"""Next-hour water level at a harbour tide gauge.

Hourly heights are the sum of the main harmonic constituents plus a weather
surge; a small decoder reads a window of past hours and predicts each next
hour.  Masks are picked by name from a table of small factories, and the
model is configured by a dataclass.

Source: seed self_attention_mask_guide.txt (section 3); pytorch/pytorch#103749.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from einops import rearrange

CONSTITUENTS = {"M2": 12.4206, "S2": 12.0, "N2": 12.6583, "K1": 23.9345, "O1": 25.8193}

MASKS = {
    "causal": lambda n: torch.triu(torch.full((n, n), float("-inf")), diagonal=1),
    "bidirectional": lambda n: torch.zeros(n, n),
}


@dataclass(frozen=True)
class TideConfig:
    window: int = 48
    dim: int = 32
    heads: int = 4
    layers: int = 2
    mask: str = "causal"
    epochs: int = 12


class Attention(nn.Module):
    def __init__(self, cfg: TideConfig):
        super().__init__()
        self.h = cfg.heads
        self.to_qkv = nn.Linear(cfg.dim, cfg.dim * 3, bias=False)
        self.to_out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, bias):
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.h) for t in self.to_qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        return self.to_out(rearrange(scores.softmax(dim=-1) @ v, "b h n d -> b n (h d)"))


class TideDecoder(nn.Module):
    def __init__(self, cfg: TideConfig):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(3, cfg.dim)
        self.pos = nn.Embedding(cfg.window, cfg.dim)
        self.attn = nn.ModuleList(Attention(cfg) for _ in range(cfg.layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(cfg.dim), nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(), nn.Linear(2 * cfg.dim, cfg.dim))
            for _ in range(cfg.layers)
        )
        self.norm = nn.ModuleList(nn.LayerNorm(cfg.dim) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.dim, 1)
        self.register_buffer("bias", MASKS[cfg.mask](cfg.window), persistent=False)

    def forward(self, height, hour):
        n = height.shape[1]
        phase = 2 * math.pi * (hour % 24) / 24
        x = self.inp(torch.stack([height, phase.sin(), phase.cos()], dim=-1)) + self.pos.weight[:n]
        for attn, norm, mlp in zip(self.attn, self.norm, self.mlp):
            x = x + attn(norm(x), self.bias[:n, :n])
            x = x + mlp(x)
        return self.out(x).squeeze(-1)


def synthesize(hours, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(hours, dtype=torch.float32)
    amps = torch.rand(len(CONSTITUENTS), generator=g) * 0.8 + 0.2
    level = sum(a * torch.cos(2 * math.pi * t / period) for a, period in zip(amps, CONSTITUENTS.values()))
    surge = torch.cumsum(torch.randn(hours, generator=g) * 0.03, 0)
    return t, level + surge - surge.mean()


def windows(t, level, size):
    idx = torch.arange(0, len(t) - size - 1, 7)
    take = idx[:, None] + torch.arange(size)[None]
    return level[take], t[take], level[take + 1]


def main():
    torch.manual_seed(0)
    cfg = TideConfig()
    t, level = synthesize(24 * 90)
    split = 24 * 75
    train = windows(t[:split], level[:split], cfg.window)
    test = windows(t[split:], level[split:], cfg.window)
    model = TideDecoder(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(cfg.epochs):
        perm = torch.randperm(len(train[0]))
        for chunk in perm.split(32):
            x, hr, y = (a[chunk] for a in train)
            loss = nn.functional.mse_loss(model(x, hr), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(test[0], test[1])
    rmse = (pred[:, -1] - test[2][:, -1]).pow(2).mean().sqrt().item()
    persistence = (test[0][:, -1] - test[2][:, -1]).pow(2).mean().sqrt().item()
    print(f"train loss {loss.item():.4f}  next-hour RMSE {rmse:.3f} m (persistence {persistence:.3f} m)")


if __name__ == "__main__":
    main()
