"""Hyphenation points for a typesetting engine's line breaker.

A character encoder tags every gap between two letters as a legal break or
not.  The attention function is assembled with functools.partial and handed to
each block, and the render workers run the trained tagger in float16.

Source: NVIDIA/apex#1052; NVIDIA/apex#1105; facebookresearch/fairseq#3575.
"""
from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import einsum, rearrange

PAD = 0
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
STOI = {c: i + 1 for i, c in enumerate(ALPHABET)}
SYLLABLES = ["ty", "po", "gra", "phy", "ker", "ning", "lig", "a", "ture", "ser",
             "if", "mo", "no", "space", "ba", "se", "line", "em", "dash", "fo"]


@dataclass
class TaggerConfig:
    dim: int = 64
    heads: int = 4
    depth: int = 2
    max_len: int = 24
    lr: float = 3e-3
    steps: int = 150
    render_dtype: torch.dtype = torch.float16


def masked_attention(q, k, v, keep, *, fill_value):
    scores = einsum(q, k, "b h i d, b h j d -> b h i j") * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~keep[:, None, None, :], fill_value)
    return einsum(scores.softmax(dim=-1), v, "b h i j, b h j d -> b h i d")


attend = partial(masked_attention, fill_value=float("-inf"))


class Block(nn.Module):
    def __init__(self, cfg: TaggerConfig, attn_fn=attend):
        super().__init__()
        self.heads = cfg.heads
        self.attn_fn = attn_fn
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, keep):
        q, k, v = rearrange(self.qkv(self.norm1(x)), "b n (three h d) -> three b h n d", three=3, h=self.heads)
        x = x + self.proj(rearrange(self.attn_fn(q, k, v, keep), "b h n d -> b n (h d)"))
        return x + self.ff(self.norm2(x))


class HyphenTagger(nn.Module):
    def __init__(self, cfg: TaggerConfig):
        super().__init__()
        self.embed = nn.Embedding(len(ALPHABET) + 1, cfg.dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.randn(cfg.max_len, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.head = nn.Linear(cfg.dim, 1)

    def forward(self, ids):
        keep = ids != PAD
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x, keep)
        return self.head(x).squeeze(-1)


def make_word(rng):
    parts = [rng.choice(SYLLABLES) for _ in range(rng.randint(2, 5))]
    word = "".join(parts)
    breaks, pos = set(), 0
    for part in parts[:-1]:
        pos += len(part)
        breaks.add(pos - 1)
    return word, breaks


def encode(words, cfg):
    width = min(cfg.max_len, max(len(w) for w, _ in words))
    ids = torch.full((len(words), width), PAD, dtype=torch.long)
    target = torch.zeros(len(words), width)
    for row, (word, breaks) in enumerate(words):
        word = word[:width]
        ids[row, : len(word)] = torch.tensor([STOI[c] for c in word])
        target[row, [b for b in breaks if b < len(word) - 1]] = 1.0
    return ids, target


def train(cfg, rng):
    model = HyphenTagger(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    for _ in range(cfg.steps):
        ids, target = encode([make_word(rng) for _ in range(32)], cfg)
        logits = model(ids)
        loss = F.binary_cross_entropy_with_logits(logits[ids != PAD], target[ids != PAD])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


@torch.no_grad()
def hyphenate(model, words, cfg):
    ids, _ = encode([(w, set()) for w in words], cfg)
    probs = model(ids).float().sigmoid()
    out = []
    for row, word in enumerate(words):
        cuts = [i for i in range(len(word) - 1) if probs[row, i] > 0.5]
        out.append("".join(c + ("-" if i in cuts else "") for i, c in enumerate(word)))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    cfg = TaggerConfig()
    model = train(cfg, rng).eval()
    held = [make_word(rng) for _ in range(200)]
    ids, target = encode(held, cfg)
    with torch.no_grad():
        pred = model(ids) > 0
    acc = (pred == target.bool())[ids != PAD].float().mean().item()
    print(f"gap accuracy {acc:.3f}")
    render = model.to(cfg.render_dtype)
    print(hyphenate(render, ["typography", "kerning", "ligature", "baseline"], cfg))


if __name__ == "__main__":
    main()
