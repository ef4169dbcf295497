"""Slide-level encoder for gigapixel whole-slide pathology images, tiles sharded across ranks.

A slide is tens of thousands of 256x256 tiles embedded by a frozen tile encoder; the slide
encoder attends over all tiles with sequence parallelism: each rank holds a contiguous block of
tile queries and all-gathers the keys and values of the whole slide. Slides in a batch have
different tile counts and are padded. A gated attention-MIL head predicts the slide label.
Ranks are simulated in a loop when torch.distributed is not initialised.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险); conventions.md §2.3
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def seq_parallel_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, 1


def gather_sequence(block, dim=1):
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return block
    parts = [torch.empty_like(block) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, block.contiguous())
    return torch.cat(parts, dim=dim)


def split_for_rank(x, rank, world_size, dim=1):
    return x.chunk(world_size, dim=dim)[rank]


class TileSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x_local, x_full, keep_local, keep_full):
        b, n, d = x_local.shape
        q = self.q(x_local).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x_full).view(b, -1, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~keep_full[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        attn = attn.masked_fill(~keep_local[:, None, :, None], 0.0)
        ctx = (attn @ v).transpose(1, 2).reshape(b, n, d)
        return self.out(ctx)


class SlideEncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = TileSelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x_local, x_full, keep_local, keep_full):
        h = x_local + self.attn(self.norm1(x_local), self.norm1(x_full), keep_local, keep_full)
        return h + self.mlp(self.norm2(h))


class GatedAttentionMIL(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.v = nn.Linear(dim, dim)
        self.u = nn.Linear(dim, dim)
        self.w = nn.Linear(dim, 1)
        self.cls = nn.Linear(dim, classes)

    def forward(self, tiles, tile_keep):
        logits = self.w(torch.tanh(self.v(tiles)) * torch.sigmoid(self.u(tiles))).squeeze(-1)
        logits = logits.masked_fill(~tile_keep, float("-inf"))
        weights = logits.softmax(dim=-1)
        return self.cls((weights.unsqueeze(-1) * tiles).sum(1))


class SlideEncoder(nn.Module):
    def __init__(self, tile_dim=24, dim=32, heads=4, depth=2, classes=2):
        super().__init__()
        self.proj = nn.Linear(tile_dim + 2, dim)
        self.layers = nn.ModuleList(SlideEncoderLayer(dim, heads) for _ in range(depth))
        self.head = GatedAttentionMIL(dim, classes)

    def forward(self, tiles, coords, tile_keep, simulated_world_size=1):
        x = self.proj(torch.cat([tiles, coords], dim=-1))
        rank, world_size = seq_parallel_world()
        ranks = [rank] if rank is not None else list(range(simulated_world_size))
        world_size = world_size if rank is not None else simulated_world_size
        for layer in self.layers:
            x_full = gather_sequence(x) if rank is not None else x
            blocks = []
            for r in ranks:
                x_local = x_full if world_size == 1 else split_for_rank(x_full, r, world_size)
                keep_local = split_for_rank(tile_keep, r, world_size)
                blocks.append(layer(x_local, x_full, keep_local, tile_keep))
            x = torch.cat(blocks, dim=1)
        return self.head(x, tile_keep)


def collate_slides(slides, multiple):
    longest = max(t.shape[0] for t, _, _ in slides)
    n = -(-longest // multiple) * multiple
    tiles = torch.zeros(len(slides), n, slides[0][0].shape[1])
    coords = torch.zeros(len(slides), n, 2)
    keep = torch.zeros(len(slides), n, dtype=torch.bool)
    for i, (t, c, _) in enumerate(slides):
        tiles[i, : len(t)], coords[i, : len(t)], keep[i, : len(t)] = t, c, True
    return {"tiles": tiles, "coords": coords, "tile_keep": keep, "label": torch.tensor([y for _, _, y in slides])}


def synthetic_slides(n, tile_dim=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    slides = []
    for _ in range(n):
        count = int(torch.randint(20, 60, (1,), generator=g))
        label = int(torch.randint(2, (1,), generator=g))
        tiles = torch.randn(count, tile_dim, generator=g)
        tumour = torch.rand(count, generator=g) < 0.15 * label
        tiles[tumour, 0] += 3.0
        slides.append((tiles, torch.rand(count, 2, generator=g), label))
    return slides


def train(steps=60, world_size=2, seed=0):
    torch.manual_seed(seed)
    model = SlideEncoder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = synthetic_slides(128, seed=seed)
    for step in range(steps):
        batch = collate_slides([data[(step * 8 + i) % len(data)] for i in range(8)], multiple=world_size)
        logits = model(batch["tiles"], batch["coords"], batch["tile_keep"], simulated_world_size=world_size)
        loss = F.cross_entropy(logits, batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    print("loss %.3f" % train())
