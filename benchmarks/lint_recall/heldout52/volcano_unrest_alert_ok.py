"""Alert level from a volcano observatory's monitoring stations.

Every station reports SO2 flux, tilt and RSAM over the last day; telemetry
drops out often, and an offline station's readings arrive as NaN.  Stations are
tokens, an attention layer mixes them, and a pooled head gives the next alert
level.  Layers are built from a spec list by a small factory.

Source: pytorch/pytorch#103963; huggingface/transformers#32195.
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, reduce

LEVELS = ["normal", "advisory", "watch", "warning"]
STATIONS = 10
FEATURES = 3 * 24
SPEC = [("station_attention", {"heads": 4}), ("feed_forward", {"mult": 2})] * 2
DIM = 48


class StationAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, online):
        q, k, v = rearrange(self.qkv(self.norm(x)), "b s (t h d) -> t b h s d", t=3, h=self.heads)
        visible = rearrange(online, "b s -> b 1 1 s")
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
        return x + self.out(rearrange(o, "b h s d -> b s (h d)"))


class FeedForward(nn.Module):
    def __init__(self, dim, mult):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, mult * dim), nn.GELU(), nn.Linear(mult * dim, dim))

    def forward(self, x, online):
        return x + self.net(x)


BUILDERS = {"station_attention": StationAttention, "feed_forward": FeedForward}


class UnrestModel(nn.Module):
    def __init__(self, spec, dim=DIM):
        super().__init__()
        self.inp = nn.Linear(FEATURES, dim)
        self.station = nn.Embedding(STATIONS, dim)
        self.blocks = nn.ModuleList(BUILDERS[name](dim, **kw) for name, kw in spec)
        self.head = nn.Linear(dim, len(LEVELS))

    def forward(self, readings):
        online = ~readings.isnan().any(dim=-1)
        x = self.inp(readings.nan_to_num(0.0)) + self.station.weight
        for block in self.blocks:
            x = block(x, online)
        w = rearrange(online.float(), "b s -> b s 1")
        return self.head(reduce(x * w, "b s d -> b d", "sum") / reduce(w, "b s d -> b d", "sum"))


def observe(rng):
    level = rng.randrange(len(LEVELS))
    t = torch.linspace(0, 1, 24)
    rows = []
    for s in range(STATIONS):
        gain = 0.3 + 0.7 * (s % 3 == 0)
        so2 = gain * level * (0.5 + t) + 0.3 * torch.randn(24)
        tilt = gain * level * t ** 2 + 0.3 * torch.randn(24)
        rsam = gain * level * 0.8 + 0.3 * torch.randn(24)
        rows.append(torch.cat([so2, tilt, rsam]))
    readings = torch.stack(rows)
    for s in rng.sample(range(STATIONS), rng.randint(0, 5)):
        readings[s] = float("nan")
    return readings, level


def batch(rng, n):
    obs = [observe(rng) for _ in range(n)]
    return torch.stack([r for r, _ in obs]), torch.tensor([lv for _, lv in obs])


def main():
    rng = random.Random(2)
    torch.manual_seed(2)
    model = UnrestModel(SPEC)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(150):
        readings, level = batch(rng, 32)
        loss = F.cross_entropy(model(readings), level)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    readings, level = batch(rng, 400)
    with torch.no_grad():
        acc = (model(readings).argmax(-1) == level).float().mean().item()
    print(f"loss {loss.item():.3f}  alert-level accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
