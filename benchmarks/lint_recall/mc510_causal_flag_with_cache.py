"""MC510: is_causal=True where the query is shorter than the keys (a KV cache): SDPA aligns the
causal triangle to the upper left, so the new token sees only the first cached key.

Source: pytorch/pytorch#144858 ("is_causal fails for kv-cache case"), pytorch/pytorch#103082,
open-lm-engine/lm-engine PR #498, conventions.md 2.7.
Surroundings: a method with a cache concatenation, a positional is_causal, an alias, a closure.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa

DIM = 16
HEADS = 2


class KVCache:
    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is not None and self.v is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v


class CachedAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 method

    def step(self, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        k, v = cache.update(k, v)
        return sdpa(q, k, v, None, 0.0, True)  # expect: MC510 positional


def decode_loop(q_step: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor):
    def one(k_new: torch.Tensor, v_new: torch.Tensor) -> torch.Tensor:
        keys = torch.cat((past_k, k_new), dim=-2)
        values = torch.cat((past_v, v_new), dim=-2)
        return F.scaled_dot_product_attention(q_step, keys, values, is_causal=True)  # expect: MC510 closure

    return one
