"""Recrystallised-grain classification from EBSD maps of cold-rolled and annealed steel.

Grains are reconstructed from the EBSD map (MTEX-style, 10 degree threshold) and exported as
one row per grain: mean orientation as Bunge Euler angles, equivalent circle diameter,
aspect ratio, grain orientation spread (GOS) proxy features and the list of neighbouring
grain ids. Attention runs over each map's grains, restricted to the grain itself and its
neighbours through an additive bias, and labels each grain recrystallised or deformed.
Maps have different numbers of grains and are padded by hand.

Source: seed self_attention_mask_guide.txt, section 3 (常见误区) and section 7 Q3.
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_GRAINS = 64


def simulate_map(rng):
    n = rng.integers(30, MAX_GRAINS + 1)
    xy = rng.random((n, 2))
    d = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
    adj = (d < 0.22) & (d > 0)
    rex_seed = rng.random(n) < 0.3
    rex = rex_seed | ((adj & rex_seed[None]).sum(1) >= 2)
    euler = rng.uniform(0, [2 * np.pi, np.pi / 2, np.pi / 2], (n, 3))
    ecd = np.where(rex, rng.normal(12, 3, n), rng.normal(25, 6, n))
    aspect = np.where(rex, rng.normal(1.3, 0.2, n), rng.normal(2.5, 0.6, n))
    kam = np.where(rex, rng.normal(0.4, 0.15, n), rng.normal(1.1, 0.4, n)) + 0.3 * rng.random(n)
    feats = np.column_stack([np.sin(euler), np.cos(euler), ecd / 25, aspect / 2, kam])
    return feats.astype(np.float32), adj, rex.astype(np.float32)


def pad_maps(maps):
    B = len(maps)
    X = np.zeros((B, MAX_GRAINS, maps[0][0].shape[1]), dtype=np.float32)
    y = np.zeros((B, MAX_GRAINS), dtype=np.float32)
    keep = np.zeros((B, MAX_GRAINS), dtype=bool)
    allowed = np.zeros((B, MAX_GRAINS, MAX_GRAINS), dtype=bool)
    for i, (f, adj, rex) in enumerate(maps):
        n = len(f)
        X[i, :n], y[i, :n], keep[i, :n] = f, rex, True
        allowed[i, :n, :n] = adj
        np.fill_diagonal(allowed[i], True)
    bias = np.where(allowed, 0.0, -np.inf).astype(np.float32)
    return torch.from_numpy(X), torch.from_numpy(bias), torch.from_numpy(keep), torch.from_numpy(y)


class NeighbourAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)

    @staticmethod
    def _neighbour_scores(q, k, bias):
        return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias[:, None]

    def forward(self, h, bias):
        B, G, D = h.shape
        q, k, v = (t.view(B, G, self.n_heads, -1).transpose(1, 2) for t in self.qkv(h).chunk(3, -1))
        att = torch.softmax(self._neighbour_scores(q, k, bias), dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(B, G, D))


class GrainNet(nn.Module):
    def __init__(self, n_feats, d_model=32, n_heads=4, n_layers=2):
        super().__init__()
        self.inp = nn.Linear(n_feats, d_model)
        self.att = nn.ModuleList([NeighbourAttention(d_model, n_heads) for _ in range(n_layers)])
        self.norm = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layers)])
        self.out = nn.Linear(d_model, 1)

    def forward(self, X, bias):
        h = self.inp(X)
        for att, norm in zip(self.att, self.norm):
            h = norm(h + att(h, bias))
        return self.out(h).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--maps", type=int, default=160)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    maps = [simulate_map(rng) for _ in range(args.maps)]
    n_train = int(0.8 * args.maps)
    Xtr, Btr, Ktr, ytr = pad_maps(maps[:n_train])
    Xte, Bte, Kte, yte = pad_maps(maps[n_train:])
    model = GrainNet(Xtr.shape[-1])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train)
        for start in range(0, n_train, 16):
            idx = perm[start : start + 16]
            logits = model(Xtr[idx], Btr[idx])
            loss = F.binary_cross_entropy_with_logits(logits[Ktr[idx]], ytr[idx][Ktr[idx]])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        pred = model(Xte, Bte) > 0
    acc = (pred[Kte] == yte[Kte].bool()).float().mean().item()
    print(f"train loss {loss.item():.4f}  grain accuracy {acc:.3f}  recrystallised fraction {yte[Kte].mean().item():.2f}")


if __name__ == "__main__":
    main()
