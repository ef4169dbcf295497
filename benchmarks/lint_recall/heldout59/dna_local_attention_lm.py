"""Nucleotide-level causal language model for long genomic sequences, with local attention.

On the GPU attention runs FlashAttention-2's sliding-window kernel (causal, window_size=(w - 1, 0));
a reference implementation with a dense additive bias runs on CPU and in the kernel tests.
Training windows are cut from chromosomes with reverse-complement augmentation.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask) and §6 (局部窗口attention); pytorch/pytorch#103749 (conventions.md §3 item 5), conventions.md §2.3
"""
import functools
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None

VOCAB = {"A": 0, "C": 1, "G": 2, "T": 3, "N": 4}
COMPLEMENT = torch.tensor([3, 2, 1, 0, 4])


@dataclass
class DNAConfig:
    dim: int = 64
    heads: int = 4
    depth: int = 3
    window: int = 32
    context: int = 128
    use_flash: bool = True


def tokenize(seq):
    return torch.tensor([VOCAB.get(base, 4) for base in seq.upper()], dtype=torch.long)


def reverse_complement(tokens):
    return COMPLEMENT[tokens].flip(-1)


def sample_windows(chromosome, context, batch, rc_prob=0.5):
    starts = [random.randrange(0, len(chromosome) - context - 1) for _ in range(batch)]
    windows = torch.stack([chromosome[s:s + context + 1] for s in starts])
    flip = torch.rand(batch) < rc_prob
    windows[flip] = reverse_complement(windows[flip])
    return windows[:, :-1], windows[:, 1:]


@functools.lru_cache(maxsize=8)
def local_causal_bias(n, window, device="cpu"):
    future = torch.triu(torch.full((n, n), float("-inf"), device=device))  # expect: MC503 cached
    distant = torch.tril(torch.full((n, n), float("-inf"), device=device), diagonal=-window)
    return future + distant


def reference_local_attention(q, k, v, window):
    n = q.shape[-2]
    bias = local_causal_bias(n, window, str(q.device))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores + bias, dim=-1) @ v


class LocalAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.cfg.heads, d // self.cfg.heads).unbind(2)
        if self.cfg.use_flash and flash_attn_func is not None and x.is_cuda:
            y = flash_attn_func(q.half(), k.half(), v.half(), causal=True, window_size=(self.cfg.window - 1, 0))
            y = y.to(x.dtype)
        else:
            y = reference_local_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.cfg.window)
            y = y.transpose(1, 2)
        return self.out(y.reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = LocalAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DNALM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(len(VOCAB), cfg.dim)
        self.pos = nn.Embedding(cfg.context, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, len(VOCAB), bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def train(chromosome, cfg, steps=100, batch=16, lr=3e-4):
    model = DNALM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    for step in range(steps):
        inputs, targets = sample_windows(chromosome, cfg.context, batch)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model, loss.item()


@torch.no_grad()
def bits_per_base(model, chromosome, context):
    total, count = 0.0, 0
    for start in range(0, len(chromosome) - context - 1, context):
        window = chromosome[start:start + context + 1][None]
        logits = model(window[:, :-1])
        total += F.cross_entropy(logits[0], window[0, 1:], reduction="sum").item()
        count += context
    return total / count / math.log(2)


def test_flash_matches_reference(window=32, n=256, heads=4, dim=64):
    if flash_attn_func is None or not torch.cuda.is_available():
        return None
    q, k, v = (torch.randn(2, n, heads, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    fast = flash_attn_func(q, k, v, causal=True, window_size=(window - 1, 0))
    ref = reference_local_attention(*(t.transpose(1, 2).float() for t in (q, k, v)), window)
    return (fast.float() - ref.transpose(1, 2)).abs().max().item()
