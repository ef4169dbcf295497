"""EEG foundation model over long multi-channel recordings, split into pipeline-parallel stages.

Each recording is cut into 1-second patches per electrode; tokens are (channel, patch) pairs with
a learned electrode embedding, so montages with fewer electrodes are padded up to the full 10-20
set. The model is cut into stages (embedding + first blocks, last blocks + seizure head) as for
GPipe-style pipeline parallelism; stage outputs, masks included, are sent to the next stage.
Micro-batches run stage after stage in this process when torch.distributed is not initialised.

Source: conventions.md §1 (HF 4.x AttentionMaskConverter and Keras rows); huggingface/transformers#32113 (§4.1), huggingface/transformers#32195 (§3 item 25)
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

ELECTRODES = ["Fp1", "Fp2", "F7", "F3", "Fz", "F4", "F8", "T3", "C3", "Cz", "C4", "T4", "T5", "P3", "Pz", "P4", "T6", "O1", "O2"]
PAD_CHANNEL = len(ELECTRODES)


def send_forward(tensors, next_rank):
    if dist.is_available() and dist.is_initialized():
        for t in tensors:
            dist.send(t.contiguous(), next_rank)
    return tensors


def recv_forward(tensors, prev_rank):
    if dist.is_available() and dist.is_initialized():
        for t in tensors:
            dist.recv(t, prev_rank)
    return tensors


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, extended_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + extended_mask
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class FirstStage(nn.Module):
    def __init__(self, patch_len, dim, heads, blocks, max_patches):
        super().__init__()
        self.patch = nn.Linear(patch_len, dim)
        self.electrode = nn.Embedding(PAD_CHANNEL + 1, dim)
        self.time = nn.Embedding(max_patches, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(blocks))

    def forward(self, signal, channel_ids):
        b, c, p, _ = signal.shape
        x = self.patch(signal) + self.electrode(channel_ids)[:, :, None] + self.time(torch.arange(p))
        x = x.reshape(b, c * p, -1)
        keep = (channel_ids != PAD_CHANNEL).repeat_interleave(p, dim=1)
        extended_mask = (1 - keep[:, None, None, :]) * torch.finfo(x.dtype).min  # expect: MC512 pipeline
        for block in self.blocks:
            x = block(x, extended_mask)
        return x, extended_mask, keep


class LastStage(nn.Module):
    def __init__(self, dim, heads, blocks, classes):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, extended_mask, keep):
        for block in self.blocks:
            x = block(x, extended_mask)
        w = keep.unsqueeze(-1).to(x.dtype)
        pooled = (self.norm(x) * w).sum(1) / w.sum(1).clamp(min=1)
        return self.head(pooled)


def pipeline_forward(stages, signal, channel_ids, chunks):
    outputs = []
    for sig, ch in zip(signal.chunk(chunks), channel_ids.chunk(chunks)):
        acts = send_forward(stages[0](sig, ch), next_rank=1)
        outputs.append(stages[1](*recv_forward(acts, prev_rank=0)))
    return torch.cat(outputs)


def synthetic_recordings(n, patches=8, patch_len=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    signal = torch.randn(n, PAD_CHANNEL, patches, patch_len, generator=g)
    channel_ids = torch.arange(PAD_CHANNEL).repeat(n, 1)
    seizure = torch.randint(2, (n,), generator=g)
    for i in range(n):
        montage = int(torch.randint(10, PAD_CHANNEL + 1, (1,), generator=g))
        channel_ids[i, montage:] = PAD_CHANNEL
        signal[i, montage:] = 0.0
        if seizure[i]:
            t = torch.linspace(0, 6.28 * 3, patch_len)
            signal[i, :montage, patches // 2:] += 2.0 * torch.sin(t)
    return signal, channel_ids, seizure


def train(steps=60, chunks=2, seed=0):
    torch.manual_seed(seed)
    stages = nn.ModuleList([FirstStage(32, 32, 4, 1, 8), LastStage(32, 4, 1, 2)])
    opt = torch.optim.AdamW(stages.parameters(), lr=1e-3)
    signal, channel_ids, label = synthetic_recordings(256, seed=seed)
    for step in range(steps):
        idx = torch.arange(step * 16, step * 16 + 16) % 256
        logits = pipeline_forward(stages, signal[idx], channel_ids[idx], chunks)
        loss = F.cross_entropy(logits, label[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    s, c, y = synthetic_recordings(64, seed=seed + 1)
    with torch.no_grad():
        acc = (pipeline_forward(stages, s, c, chunks).argmax(-1) == y).float().mean()
    return loss.item(), acc.item()


if __name__ == "__main__":
    print("loss %.3f  accuracy %.3f" % train())
