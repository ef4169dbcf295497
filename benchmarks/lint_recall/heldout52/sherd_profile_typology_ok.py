"""Ware typology of pottery sherds from digitised profile drawings.

Each rim sherd is a polyline of (x, y) points traced from its section drawing.
Sherds of a context sheet are packed end to end into one row, attention is
kept inside each sherd with a block-diagonal bias, and a segment mean gives one
embedding per sherd for the ware classifier.

Source: seed self_attention_mask_guide.txt (section 6).
"""
from __future__ import annotations

import math
import random
from itertools import accumulate, pairwise

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, repeat

WARES = ["amphora", "bowl", "jar", "plate"]
HPARAMS = dict(dim=32, heads=4, depth=2, lr=3e-3, steps=120)


def packed_block_bias(lengths: list[int]) -> torch.Tensor:
    offsets = list(accumulate(lengths, initial=0))
    total = offsets[-1]
    bias = torch.full((total, total), float("-inf"))
    for lo, hi in pairwise(offsets):
        bias[lo:hi, lo:hi] = 0.0
    return bias


def segment_ids(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])


class ProfileEncoder(nn.Module):
    def __init__(self, dim, heads, depth, **_):
        super().__init__()
        self.heads = heads
        self.point = nn.Sequential(nn.Linear(4, dim), nn.GELU(), nn.Linear(dim, dim))
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(depth))
        self.mix = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.cls = nn.Linear(dim, len(WARES))

    def forward(self, points, lengths):
        bias = repeat(packed_block_bias(lengths), "i j -> h i j", h=self.heads)
        seg = segment_ids(lengths)
        x = self.point(points)
        for qkv, mix, norm in zip(self.qkv, self.mix, self.norms):
            q, k, v = rearrange(qkv(norm(x)), "n (t h d) -> t h n d", t=3, h=self.heads)
            w = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias).softmax(dim=-1)
            x = x + mix(rearrange(w @ v, "h n d -> n (h d)"))
        onehot = F.one_hot(seg, len(lengths)).float()
        pooled = (onehot.T @ x) / onehot.sum(0)[:, None]
        return self.cls(pooled)


def draw_sherd(rng: random.Random):
    ware = rng.randrange(len(WARES))
    n = rng.randint(8, 20)
    t = torch.linspace(0, 1, n)
    height = [3.0, 1.2, 2.2, 0.4][ware] * (0.8 + 0.4 * rng.random())
    flare = [0.2, 1.5, 0.6, 2.5][ware]
    x = 1.0 + flare * t ** 2 + 0.05 * torch.randn(n)
    y = height * t
    dx, dy = torch.diff(x, prepend=x[:1]), torch.diff(y, prepend=y[:1])
    return torch.stack([x, y, dx, dy], dim=-1), ware


def context_sheet(rng, sherds=6):
    drawn = [draw_sherd(rng) for _ in range(sherds)]
    lengths = [len(p) for p, _ in drawn]
    points = torch.cat([p for p, _ in drawn])
    labels = torch.tensor([w for _, w in drawn])
    return points, lengths, labels


def main():
    rng = random.Random(11)
    torch.manual_seed(11)
    model = ProfileEncoder(**HPARAMS)
    opt = torch.optim.Adam(model.parameters(), lr=HPARAMS["lr"])
    for step in range(HPARAMS["steps"]):
        points, lengths, labels = context_sheet(rng)
        loss = F.cross_entropy(model(points, lengths), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    hits = total = 0
    with torch.no_grad():
        for _ in range(50):
            points, lengths, labels = context_sheet(rng)
            hits += (model(points, lengths).argmax(-1) == labels).sum().item()
            total += len(labels)
    print(f"last loss {loss.item():.3f}  ware accuracy {hits / total:.3f}")


if __name__ == "__main__":
    main()
