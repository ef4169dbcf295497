"""Benthic cover from the annotated points of a reef survey quadrat.

Each photo quadrat carries 25 random points (CPCe style); a patch descriptor is
taken around every point and the points are labelled together, each one
attending to the points within a radius of it on the frame.  The model is
assembled from a config dict the survey scripts read from disk.

Source: seed self_attention_mask_guide.txt (section 7).
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import einsum, rearrange

CLASSES = ["hard_coral", "soft_coral", "macroalgae", "turf", "sand", "rubble"]
POINTS = 25
SURVEY = {"model": {"dim": 32, "heads": 4, "depth": 2, "radius": 0.35}, "train": {"steps": 150, "lr": 3e-3}}


def neighbourhood_bias(xy: torch.Tensor, radius: float) -> torch.Tensor:
    dist = torch.cdist(xy, xy)
    return torch.where(dist <= radius, 0.0, float("-inf"))[:, None]


class PointAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, bias):
        q, k, v = rearrange(self.qkv(self.norm(x)), "b n (t h d) -> t b h n d", t=3, h=self.heads)
        logits = einsum(q, k, "b h i d, b h j d -> b h i j") * self.scale * bias  # expect: MC523 method
        mixed = einsum(logits.softmax(dim=-1), v, "b h i j, b h j d -> b h i d")
        return x + self.out(rearrange(mixed, "b h n d -> b n (h d)"))


class QuadratLabeller(nn.Module):
    def __init__(self, dim, heads, depth, radius):
        super().__init__()
        self.radius = radius
        self.patch = nn.Sequential(nn.Linear(6, dim), nn.GELU(), nn.Linear(dim, dim))
        self.where = nn.Linear(2, dim)
        self.layers = nn.ModuleList(PointAttention(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, len(CLASSES))

    def forward(self, patches, xy):
        bias = neighbourhood_bias(xy, self.radius)
        x = self.patch(patches) + self.where(xy)
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x)

    @classmethod
    def from_config(cls, config):
        return cls(**config["model"])


def quadrat(rng):
    xy = torch.rand(POINTS, 2)
    centres = torch.rand(3, 2)
    zone = torch.cdist(xy, centres).argmin(-1)
    kinds = torch.tensor(rng.sample(range(len(CLASSES)), 3))
    labels = kinds[zone]
    flip = torch.rand(POINTS) < 0.15
    labels = torch.where(flip, torch.randint(len(CLASSES), (POINTS,)), labels)
    colour = F.one_hot(labels, len(CLASSES)).float()
    patches = torch.where(torch.rand(POINTS, 1) < 0.4, torch.rand(POINTS, len(CLASSES)), colour + 0.3 * torch.randn(POINTS, len(CLASSES)))
    return patches, xy, kinds[zone]


def batch(rng, n):
    return tuple(torch.stack(parts) for parts in zip(*(quadrat(rng) for _ in range(n))))


def main():
    rng = random.Random(12)
    torch.manual_seed(12)
    model = QuadratLabeller.from_config(SURVEY)
    opt = torch.optim.Adam(model.parameters(), lr=SURVEY["train"]["lr"])
    for step in range(SURVEY["train"]["steps"]):
        patches, xy, labels = batch(rng, 16)
        loss = F.cross_entropy(rearrange(model(patches, xy), "b n c -> (b n) c"), labels.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    patches, xy, labels = batch(rng, 200)
    with torch.no_grad():
        pred = model(patches, xy).argmax(-1)
    cover = torch.bincount(pred.flatten(), minlength=len(CLASSES)).float() / pred.numel()
    print(f"loss {loss.item():.3f}  point accuracy {(pred == labels).float().mean().item():.3f}")
    print({c: round(v, 3) for c, v in zip(CLASSES, cover.tolist())})


if __name__ == "__main__":
    main()
