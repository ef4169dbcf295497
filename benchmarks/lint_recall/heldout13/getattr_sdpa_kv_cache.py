"""Held-out 13: a code-completion model with a torch-version shim that looks the fused attention up
with `getattr(F, "scaled_dot_product_attention", None)` and falls back to a matmul path on old
torch; generation keeps (key, value) tuples as the cache and feeds one token per step.

Source: huggingface/transformers#47651 and karpathy/nanochat PR #456 (SDPA's `is_causal=True` is
aligned top-left: with keys that hold a cache, L != S, the new query sees only the first key(s),
not the cache). Here the flag is passed to the function reached through getattr.
Surroundings: getattr(F, "scaled_dot_product_attention"), a tuple KV cache grown with torch.cat.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

_sdpa = getattr(F, "scaled_dot_product_attention", None)


def _attention_fallback(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=S - L)
    return att.masked_fill(~keep, float("-inf")).softmax(-1) @ v


class CompletionAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, past: Optional[Tuple[torch.Tensor, torch.Tensor]] = None):
        b, n, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        if _sdpa is not None:
            y = _sdpa(q, k, v, is_causal=True)  # expect: MC510 getattr
        else:
            y = _attention_fallback(q, k, v)
        return self.c_proj(y.transpose(1, 2).reshape(b, n, d)), (k, v)


class CompletionModel(nn.Module):
    def __init__(self, vocab: int = 300, dim: int = 32, heads: int = 4, depth: int = 2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(256, dim)
        self.blocks = nn.ModuleList([CompletionAttention(dim, heads) for _ in range(depth)])
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor, past=None, start: int = 0):
        x = self.wte(ids) + self.wpe(torch.arange(start, start + ids.shape[1]))
        presents = []
        for i, block in enumerate(self.blocks):
            h, kv = block(x, None if past is None else past[i])
            x = x + h
            presents.append(kv)
        return self.lm_head(x), presents

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, steps: int) -> torch.Tensor:
        logits, past = self(prompt)
        out = prompt
        for _ in range(steps):
            nxt = logits[:, -1:].argmax(-1)
            out = torch.cat([out, nxt], dim=1)
            logits, past = self(nxt, past, start=out.shape[1] - 1)
        return out
