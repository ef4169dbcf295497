"""Habitat type from the species list of a birding checklist.

A complete checklist is a set of species with counts.  The set encoder is
written for one checklist and batched with torch.func.vmap over padded
checklists, then pooled over the species actually recorded.

Source: pytorch/pytorch#103749; Biohub/esm#299.
"""
from __future__ import annotations

import math
import random
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from torch.func import vmap

HABITATS = ["wetland", "forest", "grassland", "urban"]
N_SPECIES = 60
CONFIG = dict(dim=32, heads=4, layers=2, max_species=24)


def checklist_attention(x, keep, w_qkv, w_out, heads):
    q, k, v = rearrange(x @ w_qkv, "n (t h d) -> t h n d", t=3, h=heads)
    pair = keep[:, None] & keep[None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~pair, float("-inf"))  # expect: MC507 vmap
    mixed = scores.softmax(dim=-1) @ v
    return rearrange(mixed, "h n d -> n (h d)") @ w_out


class ChecklistEncoder(nn.Module):
    def __init__(self, dim, heads, layers, max_species):
        super().__init__()
        self.heads = heads
        self.species = nn.Embedding(N_SPECIES + 1, dim, padding_idx=0)
        self.count = nn.Linear(1, dim)
        self.w_qkv = nn.ParameterList(nn.Parameter(torch.randn(dim, 3 * dim) / math.sqrt(dim)) for _ in range(layers))
        self.w_out = nn.ParameterList(nn.Parameter(torch.randn(dim, dim) / math.sqrt(dim)) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, len(HABITATS))

    def forward(self, species, counts, keep):
        x = self.species(species) + self.count(counts.log1p().unsqueeze(-1))
        for w_qkv, w_out, norm in zip(self.w_qkv, self.w_out, self.norms):
            attend = vmap(partial(checklist_attention, heads=self.heads), in_dims=(0, 0, None, None))
            x = x + attend(norm(x), keep, w_qkv, w_out)
        w = keep.float().unsqueeze(-1)
        return self.head((x * w).sum(1) / w.sum(1))


def make_checklist(rng):
    habitat = rng.randrange(len(HABITATS))
    core = list(range(1 + habitat * 12, 1 + habitat * 12 + 12))
    common = list(range(49, N_SPECIES + 1))
    seen = rng.sample(core, rng.randint(2, 8)) + rng.sample(common, rng.randint(1, 6))
    rng.shuffle(seen)
    return seen, [rng.randint(1, 40) for _ in seen], habitat


def collate(lists, max_species):
    n = min(max_species, max(len(s) for s, _, _ in lists))
    species = torch.zeros(len(lists), n, dtype=torch.long)
    counts = torch.zeros(len(lists), n)
    for row, (s, c, _) in enumerate(lists):
        species[row, : len(s)] = torch.tensor(s[:n])
        counts[row, : len(c)] = torch.tensor(c[:n], dtype=torch.float32)
    return species, counts, species != 0, torch.tensor([h for _, _, h in lists])


def main():
    rng = random.Random(7)
    torch.manual_seed(7)
    model = ChecklistEncoder(**CONFIG)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(150):
        species, counts, keep, habitat = collate([make_checklist(rng) for _ in range(32)], CONFIG["max_species"])
        loss = F.cross_entropy(model(species, counts, keep), habitat)
        opt.zero_grad()
        loss.backward()
        opt.step()
    species, counts, keep, habitat = collate([make_checklist(rng) for _ in range(300)], CONFIG["max_species"])
    with torch.no_grad():
        acc = (model(species, counts, keep).argmax(-1) == habitat).float().mean().item()
    print(f"loss {loss.item():.3f}  habitat accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
