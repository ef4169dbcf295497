"""Held-out 5: SDPA called with is_causal=True when only the last positions are queried.

Source: pytorch/pytorch#115111 (`F.scaled_dot_product_attention(query[:, -1, :], key, value,
is_causal=True)` "only attends to the first input token from k/v": "the offset for the implied causal
mask assumes that the first index of query along the sequence dimension is aligned with the first
index along the k/v dimension"; the reporter's workaround is an all-ones mask for the last query).
Surroundings: a reward head scoring from the last token's query, the issue's inline slice, a
speculative-decoding verifier that appends draft keys to a cache.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class LastTokenRewardHead(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.score = nn.Linear(dim, 1)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        q = self._heads(self.q(hidden[:, -1:, :]))
        k, v = (self._heads(t) for t in self.kv(hidden).chunk(2, dim=-1))
        pooled = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 sliced-query
        return self.score(pooled.transpose(1, 2).flatten(2)).squeeze(-1)


def last_position_output(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(query[:, -1, :], key, value, is_causal=True)  # expect: MC510 inline


def verify_draft(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 cache: Optional[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    # q, k, v hold the draft tokens only; the cache holds the accepted prefix
    if cache is not None:
        k = torch.cat([cache[0], k], dim=-2)
        v = torch.cat([cache[1], v], dim=-2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 helper
