"""Finishing order of a sailing fleet from the first beat of a regatta race.

Every boat is summarised by its speed, heading to the wind and distance to the
windward mark at the end of the first beat; the fleet attends across boats and
a head scores each boat's chance of finishing ahead.  Fleets differ in size and
boats that retired (DNF) stay in the table with zeroed tracks.  The attention
kernels are chosen by name from a small registry.

Source: seed masked_fill_inplace.txt.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import einsum, rearrange

MAX_FLEET = 14
KERNELS = {}


def kernel(name):
    def deco(cls):
        KERNELS[name] = cls
        return cls
    return deco


@kernel("fleet")
class FleetAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    @staticmethod
    def _scores(q, k, retired):
        scores = einsum(q, k, "b h i d, b h j d -> b h i j") / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(retired[:, None, None, :], float("-inf"))
        return scores

    def forward(self, x, retired):
        q, k, v = rearrange(self.qkv(x), "b n (t h d) -> t b h n d", t=3, h=self.heads)
        w = self._scores(q, k, retired).softmax(dim=-1)
        return self.out(rearrange(einsum(w, v, "b h i j, b h j d -> b h i d"), "b h n d -> b n (h d)"))


class RaceModel(nn.Module):
    def __init__(self, dim=32, heads=4, layers=2, kind="fleet"):
        super().__init__()
        self.inp = nn.Linear(4, dim)
        self.attn = nn.ModuleList(KERNELS[kind](dim, heads) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.score = nn.Linear(dim, 1)

    def forward(self, boats, retired):
        x = self.inp(boats)
        for attn, norm in zip(self.attn, self.norm):
            x = x + attn(norm(x), retired)
        return self.score(x).squeeze(-1)


def race(rng):
    n = rng.randint(6, MAX_FLEET)
    boats = torch.zeros(MAX_FLEET, 4)
    retired = torch.ones(MAX_FLEET, dtype=torch.bool)
    retired[:n] = torch.rand(n) < 0.15
    retired[rng.randrange(n)] = False
    skill = torch.randn(MAX_FLEET)
    speed = 6.0 + skill + 0.3 * torch.randn(MAX_FLEET)
    to_mark = 1.0 - 0.1 * skill + 0.05 * torch.randn(MAX_FLEET)
    boats[:, 0], boats[:, 1] = speed / 8, to_mark
    boats[:, 2] = torch.cos(torch.rand(MAX_FLEET))
    boats[:, 3] = to_mark - to_mark[~retired].mean()
    boats[retired] = 0.0
    finish = to_mark / speed + 0.02 * torch.randn(MAX_FLEET)
    return boats, retired, finish


def pairwise_loss(score, finish, retired):
    ahead = (finish[:, :, None] < finish[:, None, :]) & ~retired[:, :, None] & ~retired[:, None, :]
    margin = score[:, :, None] - score[:, None, :]
    return F.softplus(-margin)[ahead].mean()


def batch(rng, n):
    return tuple(torch.stack(p) for p in zip(*(race(rng) for _ in range(n))))


def main():
    rng = random.Random(13)
    torch.manual_seed(13)
    model = RaceModel()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(150):
        boats, retired, finish = batch(rng, 32)
        loss = pairwise_loss(model(boats, retired), finish, retired)
        opt.zero_grad()
        loss.backward()
        opt.step()
    boats, retired, finish = batch(rng, 300)
    with torch.no_grad():
        score = model(boats, retired)
    ahead = (finish[:, :, None] < finish[:, None, :]) & ~retired[:, :, None] & ~retired[:, None, :]
    correct = (score[:, :, None] > score[:, None, :])[ahead].float().mean().item()
    print(f"loss {loss.item():.3f}  correctly ordered pairs {correct:.3f}")


if __name__ == "__main__":
    main()
