"""Car assignment for hall calls in a bank of elevators.

Hall calls (floor, direction, time) arrive in order; for each call the model
reads the calls so far and scores the cars, imitating the building's
estimated-time-of-arrival dispatcher.  Cars out of service cannot be chosen.
The look-ahead bias is built once per length and cached.

Source: seed self_attention_mask_guide.txt (sections 3 and 7).
"""
from __future__ import annotations

import random
from functools import lru_cache

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, repeat

FLOORS, CARS, CALLS = 16, 4, 20
SETTINGS = {"dim": 32, "heads": 4, "layers": 2, "steps": 150, "batch": 32}


@lru_cache(maxsize=8)
def lookahead_bias(n: int) -> torch.Tensor:
    return torch.triu(torch.full((n, n), float("-inf")), diagonal=1)


class CallAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        q, k, v = rearrange(self.qkv(x), "b n (s h d) -> s b h n d", s=3, h=self.heads)
        bias = lookahead_bias(x.shape[1])
        attn = torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + bias, dim=-1)
        return self.proj(rearrange(attn @ v, "b h n d -> b n (h d)"))


class Dispatcher(nn.Module):
    def __init__(self, dim, heads, layers, **_):
        super().__init__()
        self.floor = nn.Embedding(FLOORS, dim)
        self.direction = nn.Embedding(2, dim)
        self.time = nn.Linear(1, dim)
        self.blocks = nn.ModuleList(CallAttention(dim, heads) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.car_state = nn.Linear(2, dim)
        self.score = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, floor, up, t, car_pos, car_ok):
        x = self.floor(floor) + self.direction(up) + self.time(t.unsqueeze(-1))
        for block, norm in zip(self.blocks, self.norms):
            x = x + block(norm(x))
        cars = self.car_state(torch.stack([car_pos.float() / FLOORS, car_ok.float()], dim=-1))
        calls = repeat(x, "b n d -> b n c d", c=CARS)
        cars = repeat(cars, "b c d -> b n c d", n=floor.shape[1])
        logits = self.score(torch.cat([calls, cars], dim=-1)).squeeze(-1)
        return logits.masked_fill(~car_ok[:, None, :], float("-inf"))


def shift(rng):
    floor = torch.tensor([rng.randrange(FLOORS) for _ in range(CALLS)])
    up = torch.tensor([rng.randrange(2) for _ in range(CALLS)])
    t = torch.cumsum(torch.rand(CALLS) * 5, 0) / 60
    car_pos = torch.tensor([rng.randrange(FLOORS) for _ in range(CARS)])
    car_ok = torch.ones(CARS, dtype=torch.bool)
    car_ok[rng.randrange(CARS)] = rng.random() > 0.3
    pos, target = car_pos.clone(), []
    for f in floor.tolist():
        eta = (pos - f).abs().float().masked_fill(~car_ok, float("inf"))
        car = int(eta.argmin())
        target.append(car)
        pos[car] = f
    return floor, up, t, car_pos, car_ok, torch.tensor(target)


def batch(rng, n):
    return tuple(torch.stack(parts) for parts in zip(*(shift(rng) for _ in range(n))))


def main():
    rng = random.Random(8)
    torch.manual_seed(8)
    model = Dispatcher(**SETTINGS)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(SETTINGS["steps"]):
        *inputs, target = batch(rng, SETTINGS["batch"])
        loss = F.cross_entropy(rearrange(model(*inputs), "b n c -> (b n) c"), target.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    *inputs, target = batch(rng, 300)
    with torch.no_grad():
        acc = (model(*inputs).argmax(-1) == target).float().mean().item()
    print(f"loss {loss.item():.3f}  agreement with ETA dispatcher {acc:.3f}")


if __name__ == "__main__":
    main()
