"""Causal P/S phase picker for earthquake early warning over long continuous three-component records.

The waveform is cut into 0.1 s frames; a transformer labels every frame as noise, P arrival or S
arrival, and may only look at the past so that it can run on the live stream. Long records are
split over context-parallel ranks: each rank takes a contiguous block of frames as queries and
attends to every frame up to its own (causal offset of rank * block); the ranks run in a loop
when torch.distributed is not initialised.

Source: conventions.md §1 (direction cheat-sheet), §5 item 4; seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

NOISE, P_PHASE, S_PHASE = 0, 1, 2


def cp_layout(simulated):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated)), simulated


def causal_bias_for_rank(rank, block, total, dtype=torch.float32):
    q_pos = rank * block + torch.arange(block)
    k_pos = torch.arange(total)
    bias = torch.zeros(block, total, dtype=dtype)
    return bias.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))


def make_block_attention(bias, head_dim):
    scale = 1.0 / math.sqrt(head_dim)

    def attend(q, k, v):
        scores = (q @ k.transpose(-1, -2)) * scale
        scores = scores + bias
        return scores.softmax(dim=-1) @ v

    return attend


class FrameAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x_block, x_all, attend):
        b, n, d = x_block.shape
        q = self.q(x_block).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x_all).view(b, -1, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return self.out(attend(q, k, v).transpose(1, 2).reshape(b, n, d))


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = FrameAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x_block, x_all, attend):
        h = x_block + self.attn(self.ln1(x_block), self.ln1(x_all), attend)
        return h + self.ff(self.ln2(h))


class StreamingPicker(nn.Module):
    def __init__(self, samples_per_frame=10, dim=32, heads=4, depth=2, cp=2):
        super().__init__()
        self.cp, self.heads = cp, heads
        self.frame = nn.Conv1d(3, dim, kernel_size=samples_per_frame, stride=samples_per_frame)
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, 3)

    def forward(self, waveform):
        x = self.frame(waveform).transpose(1, 2)
        ranks, world = cp_layout(self.cp)
        total = x.shape[1]
        block = total // world
        attends = {r: make_block_attention(causal_bias_for_rank(r, block, total, x.dtype), x.shape[-1] // self.heads) for r in ranks}
        for layer in self.layers:
            x = torch.cat([layer(x[:, r * block:(r + 1) * block], x, attends[r]) for r in ranks], dim=1)
        return self.head(x)


def synthetic_records(n, frames=32, spf=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    wave = 0.1 * torch.randn(n, 3, frames * spf, generator=g)
    labels = torch.full((n, frames), NOISE, dtype=torch.long)
    for i in range(n):
        p = int(torch.randint(4, frames // 2, (1,), generator=g))
        s = p + int(torch.randint(3, frames // 2 - 2, (1,), generator=g))
        t = torch.arange(frames * spf - p * spf, dtype=torch.float)
        wave[i, 2, p * spf:] += torch.sin(t * 0.9) * torch.exp(-t / 60)
        t = torch.arange(frames * spf - s * spf, dtype=torch.float)
        wave[i, :2, s * spf:] += 2 * torch.sin(t * 0.4) * torch.exp(-t / 80)
        labels[i, p], labels[i, s] = P_PHASE, S_PHASE
    return wave, labels


def train(steps=120, seed=0):
    torch.manual_seed(seed)
    model = StreamingPicker()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    wave, labels = synthetic_records(512, seed=seed)
    weights = torch.tensor([1.0, 10.0, 10.0])
    for step in range(steps):
        idx = torch.arange(step * 16, step * 16 + 16) % 512
        logits = model(wave[idx])
        loss = F.cross_entropy(logits.reshape(-1, 3), labels[idx].reshape(-1), weight=weights)
        opt.zero_grad()
        loss.backward()
        opt.step()
    w, y = synthetic_records(64, seed=seed + 1)
    with torch.no_grad():
        pred = model(w).argmax(-1)
    picks = y != NOISE
    return loss.item(), (pred[picks] == y[picks]).float().mean().item()


if __name__ == "__main__":
    print("loss %.3f  pick recall %.3f" % train())
