"""Delay at every stop of the trains of one timetable hour.

A batch is one hour of a line's timetable: a fixed grid of train slots by
stops.  Stops that a train does not serve are padding, and only the stops whose
delay report has arrived may be read; an hour with fewer trains leaves empty
slots.  The key biases come from a registry of builders and are combined
before the eager attention.

Source: huggingface/transformers PR #27114; NVIDIA-NeMo/Automodel PR #2658.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn as nn
from einops import rearrange

SLOTS, STOPS = 6, 12
BIAS_BUILDERS = {}


def key_bias(name):
    def register(fn):
        BIAS_BUILDERS[name] = fn
        return fn
    return register


@key_bias("padding")
def padding_bias(batch, dtype):
    hidden = ~batch["served"]
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)[:, None, None, :]


@key_bias("unreported")
def unreported_bias(batch, dtype):
    hidden = torch.arange(STOPS)[None, :] >= batch["reported"][:, None]
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)[:, None, None, :]


class DelayAttention(nn.Module):
    def __init__(self, dim, heads, biases=("padding", "unreported")):
        super().__init__()
        self.heads = heads
        self.bias_fns = [BIAS_BUILDERS[name] for name in biases]
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, batch):
        q, k, v = rearrange(self.qkv(x), "b s (t h d) -> t b h s d", t=3, h=self.heads)
        bias = sum(fn(batch, q.dtype) for fn in self.bias_fns).clamp(min=torch.finfo(q.dtype).min)
        w = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias).softmax(dim=-1)
        return self.out(rearrange(w @ v, "b h s d -> b s (h d)"))


class DelayModel(nn.Module):
    def __init__(self, dim=32, heads=4, layers=2):
        super().__init__()
        self.stop = nn.Embedding(STOPS, dim)
        self.inp = nn.Linear(3, dim)
        self.attn = nn.ModuleList(DelayAttention(dim, heads) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.out = nn.Linear(dim, 1)

    def forward(self, batch):
        seen = (torch.arange(STOPS)[None, :] < batch["reported"][:, None]).float()
        feats = torch.stack([batch["delay"] * seen, seen, batch["dwell"]], dim=-1)
        x = self.inp(feats) + self.stop.weight
        for attn, norm in zip(self.attn, self.norm):
            x = x + attn(norm(x), batch)
        return self.out(x).squeeze(-1)


def timetable_hour(rng):
    trains = rng.randint(3, SLOTS)
    served = torch.zeros(SLOTS, STOPS, dtype=torch.bool)
    delay = torch.zeros(SLOTS, STOPS)
    dwell = torch.zeros(SLOTS, STOPS)
    reported = torch.zeros(SLOTS, dtype=torch.long)
    for slot in range(trains):
        length = rng.randint(5, STOPS)
        served[slot, :length] = True
        start = rng.expovariate(0.5)
        steps = torch.tensor([rng.gauss(0.3, 0.4) for _ in range(length)])
        delay[slot, :length] = (start + steps.cumsum(0)).clamp(min=0)
        dwell[slot, :length] = torch.rand(length)
        reported[slot] = rng.randint(1, length)
    return {"served": served, "delay": delay, "dwell": dwell, "reported": reported}


def main():
    rng = random.Random(9)
    torch.manual_seed(9)
    model = DelayModel()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(200):
        batch = timetable_hour(rng)
        err = (model(batch) - batch["delay"]) ** 2
        loss = (err * batch["served"]).sum() / batch["served"].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    mae, n = 0.0, 0
    with torch.no_grad():
        for _ in range(50):
            batch = timetable_hour(rng)
            future = batch["served"] & (torch.arange(STOPS)[None, :] >= batch["reported"][:, None])
            mae += (model(batch) - batch["delay"]).abs()[future].sum().item()
            n += int(future.sum())
    print(f"train loss {loss.item():.3f}  MAE on unreported stops {mae / n:.2f} min")


if __name__ == "__main__":
    main()
