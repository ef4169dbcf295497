"""Decoder-only LM that keeps its key/value cache in a small dataclass per layer.

`LayerCache.update(k, v)` appends the new keys/values and returns everything cached so far,
so after the prompt the keys are longer than the queries (S = past + new > L). Attention is
causal: query i (at absolute position past + i) may see every cached key and the new keys up
to itself. `generate` runs the prompt once, then feeds one token at a time.

Source: conventions.md §1 (SDPA is_causal row: tril(diagonal=0), upper-left aligned when
L != S), §2.7 and §5 item 8, pytorch/pytorch PR #111007 (lower-right vs upper-left causal
alignment).
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LayerCache:
    k: Optional[torch.Tensor] = None
    v: Optional[torch.Tensor] = None

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v


@dataclass
class DecoderCache:
    layers: List[LayerCache] = field(default_factory=list)

    def seen(self) -> int:
        return 0 if not self.layers or self.layers[0].k is None else self.layers[0].k.shape[2]


class CachedSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cache: Optional[LayerCache] = None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 dataclass
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 48, dim: int = 32, heads: int = 4, layers: int = 2, ctx: int = 32):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.attn = nn.ModuleList(CachedSelfAttention(dim, heads) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, cache: Optional[DecoderCache] = None):
        start = cache.seen() if cache is not None else 0
        if cache is not None and not cache.layers:
            cache.layers = [LayerCache() for _ in self.attn]
        x = self.tok(idx) + self.pos(torch.arange(start, start + idx.shape[1]))
        for i, (attn, norm) in enumerate(zip(self.attn, self.norm)):
            x = x + attn(norm(x), cache.layers[i] if cache is not None else None)
        return self.head(x)


@torch.no_grad()
def generate(model, prompt, steps, use_cache=True):
    cache = DecoderCache() if use_cache else None
    tokens, logits = prompt, model(prompt, cache)
    for _ in range(steps):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = model(nxt, cache) if use_cache else model(tokens)
    return tokens


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyLM().eval()
    prompt = torch.tensor([[5, 17, 3, 29, 11]])
    fast = generate(model, prompt, steps=8)
    slow = generate(model, prompt, steps=8, use_cache=False)
    print("cached  :", fast.tolist())
    print("no cache:", slow.tolist())
    print("identical:", torch.equal(fast, slow))
