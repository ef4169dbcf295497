"""Hit-level transformer for charged-particle tracking in a silicon detector (TrackML-style events).

Each event is a set of space points (r, phi, z, layer); the model tags every hit as belonging to
a reconstructable track or to noise before the track-building step. Events have very different
hit counts and are padded per batch. Training is data parallel: each rank reads every
world_size-th event (DistributedSampler order) and the model is wrapped in DDP when
torch.distributed is initialised; in one process it is the plain module.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21)
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

PAD_HIT = -1


def rank_and_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def collate_events(events):
    n = max(e["features"].shape[0] for e in events)
    feats = torch.zeros(len(events), n, events[0]["features"].shape[1])
    hit_ids = torch.full((len(events), n), PAD_HIT, dtype=torch.long)
    labels = torch.full((len(events), n), -100, dtype=torch.long)
    for i, e in enumerate(events):
        k = e["features"].shape[0]
        feats[i, :k], hit_ids[i, :k], labels[i, :k] = e["features"], torch.arange(k), e["labels"]
    hit_mask = (hit_ids != PAD_HIT).unsqueeze(1).unsqueeze(3)  # expect: MC514 collate
    return {"features": feats, "hit_ids": hit_ids, "hit_mask": hit_mask, "labels": labels}


class HitAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.same_layer_bias = nn.Parameter(torch.zeros(heads))

    def forward(self, x, hit_mask, layer_ids):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        same_layer = (layer_ids[:, :, None] == layer_ids[:, None, :])[:, None]
        scores = scores + same_layer * self.same_layer_bias[None, :, None, None]
        scores = scores.masked_fill(hit_mask == 0, torch.finfo(scores.dtype).min)  # also: MC514
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        return self.out(y)


class HitTagger(nn.Module):
    def __init__(self, in_dim=4, dim=32, heads=4, depth=3):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.attn = nn.ModuleList(HitAttention(dim, heads) for _ in range(depth))
        self.ffn = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 2)

    def forward(self, features, hit_mask):
        layer_ids = features[..., 3].round().long()
        x = self.embed(features)
        for attn, ffn, norm in zip(self.attn, self.ffn, self.norms):
            x = x + attn(norm(x), hit_mask, layer_ids)
            x = x + ffn(x)
        return self.head(x)


def simulate_event(g, layers=6):
    tracks = int(torch.randint(2, 6, (1,), generator=g))
    phi0 = torch.rand(tracks, generator=g) * 2 * math.pi
    curv = (torch.rand(tracks, generator=g) - 0.5) * 0.2
    eta = torch.randn(tracks, generator=g)
    r = torch.arange(1, layers + 1, dtype=torch.float)
    hits = [torch.stack([r, phi0[t] + curv[t] * r, eta[t] * r, r - 1], -1) for t in range(tracks)]
    noise_n = int(torch.randint(4, 20, (1,), generator=g))
    noise = torch.stack([torch.randint(1, layers + 1, (noise_n,), generator=g).float(),
                         torch.rand(noise_n, generator=g) * 2 * math.pi, torch.randn(noise_n, generator=g) * 3], -1)
    noise = torch.cat([noise, noise[:, :1] - 1], -1)
    feats = torch.cat(hits + [noise])
    labels = torch.cat([torch.ones(tracks * layers, dtype=torch.long), torch.zeros(noise_n, dtype=torch.long)])
    order = torch.randperm(len(feats), generator=g)
    feats = feats[order]
    feats[:, 1] = torch.remainder(feats[:, 1], 2 * math.pi)
    return {"features": feats, "labels": labels[order]}


def train(epochs=3, batch_size=8, seed=0):
    torch.manual_seed(seed)
    rank, world = rank_and_world()
    g = torch.Generator().manual_seed(seed)
    events = [simulate_event(g) for _ in range(384)][rank::world]
    model = HitTagger()
    if world > 1:
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(epochs):
        for i in range(0, len(events), batch_size):
            batch = collate_events(events[i: i + batch_size])
            logits = model(batch["features"], batch["hit_mask"])
            loss = F.cross_entropy(logits.reshape(-1, 2), batch["labels"].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    test = collate_events([simulate_event(g) for _ in range(64)])
    with torch.no_grad():
        pred = model(test["features"], test["hit_mask"]).argmax(-1)
    real = test["labels"] != -100
    return loss.item(), (pred[real] == test["labels"][real]).float().mean().item()


if __name__ == "__main__":
    print("loss %.3f  hit accuracy %.3f" % train())
