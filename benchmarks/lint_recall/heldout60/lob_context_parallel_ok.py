"""Mid-price movement forecasting from long limit-order-book tick sequences, context parallel.

Each sample is a window of thousands of order-book snapshots (ten levels of bid/ask price and
size); the model predicts the direction of the next mid-price move at every tick. The tick axis
is split into contiguous blocks, one per context-parallel rank: a rank's query block attends to
the keys of the whole window with a causal offset of rank * block. Training runs under bfloat16
autocast, data parallel over DDP when torch.distributed is initialised; otherwise the ranks run
in a loop in this process.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20), §1, §5 item 5
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def context_parallel_ranks(simulated):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated)), simulated


def block_future_mask(rank, block, total, device=None):
    q_pos = rank * block + torch.arange(block, device=device)
    k_pos = torch.arange(total, device=device)
    return k_pos[None, :] > q_pos[:, None]


class TickAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x_block, x_all, future):
        b, n, d = x_block.shape
        q = self.q(x_block).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x_all).view(b, -1, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class TickBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = TickAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x_block, x_all, future):
        h = x_block + self.attn(self.ln1(x_block), self.ln1(x_all), future)
        return h + self.ff(self.ln2(h))


class OrderBookTransformer(nn.Module):
    def __init__(self, levels=10, dim=32, heads=4, depth=2, cp_size=2):
        super().__init__()
        self.cp_size = cp_size
        self.embed = nn.Linear(4 * levels, dim)
        self.blocks = nn.ModuleList(TickBlock(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, 3)

    def forward(self, book):
        ranks, world = context_parallel_ranks(self.cp_size)
        total = book.shape[1]
        block = total // world
        x = self.embed(book)
        masks = {r: block_future_mask(r, block, total, book.device) for r in ranks}
        for layer in self.blocks:
            x = torch.cat([layer(x[:, r * block:(r + 1) * block], x, masks[r]) for r in ranks], dim=1)
        return self.head(x)


def simulate_book(n, ticks, levels=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    mid = 100 + torch.randn(n, ticks + 1, generator=g).mul(0.05).cumsum(1)
    spread = 0.01 + 0.02 * torch.rand(n, ticks + 1, 1, generator=g)
    offsets = torch.arange(levels) * 0.01
    bids = mid[..., None] - spread / 2 - offsets
    asks = mid[..., None] + spread / 2 + offsets
    sizes = torch.rand(n, ticks + 1, 2 * levels, generator=g)
    book = torch.cat([bids - mid[:, :1, None], asks - mid[:, :1, None], sizes], -1)
    move = mid[:, 1:] - mid[:, :-1]
    label = torch.where(move > 0.02, 2, torch.where(move < -0.02, 0, 1))
    return book[:, :-1], label


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--ticks", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--cp-size", type=int, default=2)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = OrderBookTransformer(cp_size=args.cp_size)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    book, label = simulate_book(512, args.ticks)
    for step in range(args.steps):
        idx = torch.arange(step * 16, step * 16 + 16) % 512
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(book[idx])
        loss = F.cross_entropy(logits.float().reshape(-1, 3), label[idx].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    test_book, test_label = simulate_book(64, args.ticks, seed=1)
    with torch.no_grad():
        acc = (model(test_book).argmax(-1) == test_label).float().mean().item()
    return loss.item(), acc


if __name__ == "__main__":
    print("loss %.3f  direction accuracy %.3f" % main())
