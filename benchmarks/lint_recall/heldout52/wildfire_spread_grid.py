"""Next-hour fire spread on a gridded landscape.

Cells of a 10 x 10 landscape carry fuel load, moisture, slope and whether they
burn now; attention is limited to nearby cells by a registered bias, and roads
and water (firebreaks) are never read as sources of spread.  A batch holds
several weather scenarios on the same landscape, and training walks through
many landscapes.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange

SIDE = 10


@dataclass
class SpreadConfig:
    dim: int = 32
    heads: int = 4
    layers: int = 2
    reach: int = 2
    landscapes: int = 120
    scenarios: int = 16


class SpreadModel(nn.Module):
    def __init__(self, cfg: SpreadConfig):
        super().__init__()
        self.cfg = cfg
        rc = torch.cartesian_prod(torch.arange(SIDE), torch.arange(SIDE))
        near = (rc[:, None, :] - rc[None, :, :]).abs().amax(-1) <= cfg.reach
        self.register_buffer("neighbour_bias", torch.zeros(SIDE * SIDE, SIDE * SIDE).masked_fill(~near, float("-inf")))
        self.inp = nn.Linear(6, cfg.dim)
        self.pos = nn.Parameter(torch.randn(SIDE * SIDE, cfg.dim) * 0.02)
        self.qkv = nn.ModuleList(nn.Linear(cfg.dim, 3 * cfg.dim) for _ in range(cfg.layers))
        self.mix = nn.ModuleList(nn.Linear(cfg.dim, cfg.dim) for _ in range(cfg.layers))
        self.norm = nn.ModuleList(nn.LayerNorm(cfg.dim) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.dim, 1)

    def forward(self, cells, firebreak):
        def barrier_bias():
            return self.neighbour_bias.masked_fill_(firebreak[None, :], float("-inf"))  # expect: MC524 closure

        bias = barrier_bias()
        x = self.inp(rearrange(cells, "b f r c -> b (r c) f")) + self.pos
        for qkv, mix, norm in zip(self.qkv, self.mix, self.norm):
            q, k, v = rearrange(qkv(norm(x)), "b n (t h d) -> t b h n d", t=3, h=self.cfg.heads)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            x = x + mix(rearrange(o, "b h n d -> b n (h d)"))
        return rearrange(self.out(x), "b (r c) 1 -> b r c", r=SIDE)


def landscape(rng):
    fuel = torch.rand(SIDE, SIDE)
    slope = torch.rand(SIDE, SIDE)
    firebreak = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    firebreak[rng.randrange(SIDE), :] = True
    firebreak[:, rng.randrange(SIDE)] = rng.random() < 0.5
    return fuel, slope, firebreak


def scenario(fuel, slope, firebreak, rng):
    moisture = torch.full((SIDE, SIDE), rng.random() * 0.6)
    burning = torch.zeros(SIDE, SIDE)
    for _ in range(3):
        burning[rng.randrange(SIDE), rng.randrange(SIDE)] = 1.0
    burning[firebreak] = 0.0
    near = F.max_pool2d(burning[None, None], 3, stride=1, padding=1)[0, 0]
    nxt = ((near > 0) & (fuel + 0.3 * slope > moisture + 0.35) & ~firebreak).float()
    feats = torch.stack([fuel, moisture, slope, burning, firebreak.float(), near])
    return feats, torch.maximum(nxt, burning)


def batch(rng, cfg):
    fuel, slope, firebreak = landscape(rng)
    pairs = [scenario(fuel, slope, firebreak, rng) for _ in range(cfg.scenarios)]
    return torch.stack([p for p, _ in pairs]), firebreak.flatten(), torch.stack([t for _, t in pairs])


def main():
    rng = random.Random(21)
    torch.manual_seed(21)
    cfg = SpreadConfig()
    model = SpreadModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(cfg.landscapes):
        cells, firebreak, target = batch(rng, cfg)
        loss = F.binary_cross_entropy_with_logits(model(cells, firebreak), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    hits = total = 0
    with torch.no_grad():
        for _ in range(20):
            cells, firebreak, target = batch(rng, cfg)
            pred = model(cells, firebreak) > 0
            hits += (pred & target.bool()).sum().item()
            total += (pred | target.bool()).sum().item()
    print(f"loss {loss.item():.3f}  burnt-area IoU {hits / total:.3f}")
    print(f"blocked pairs in the saved bias: {int(model.state_dict()['neighbour_bias'].isinf().sum())}")


if __name__ == "__main__":
    main()
