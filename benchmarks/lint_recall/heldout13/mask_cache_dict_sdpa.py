"""Held-out 13: a symbolic-music decoder (event tokens) whose attention keeps the causal masks it
has built in a dict on the module, keyed by length, so that long pieces do not rebuild them.

Source: rasbt/LLMs-from-scratch#1061 (a `triu(..., diagonal=1).bool()` mask, True = future, the
nn.MultiheadAttention convention, handed to F.scaled_dot_product_attention, whose bool attn_mask
means True = may attend) and pytorch/pytorch#29546 (a look-ahead mask the wrong way round): each
event sees only later events, and the last one sees nothing.
Surroundings: a mask cached in a plain dict attribute (`self._mask_cache[n]`), built on a miss by a
method, read back on every call.
"""

from typing import Dict

import torch
import torch.nn.functional as F
from torch import nn


class EventAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self._mask_cache: Dict[int, torch.Tensor] = {}

    def _look_ahead(self, n: int, device: torch.device) -> torch.Tensor:
        if n not in self._mask_cache:
            self._mask_cache[n] = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)  # expect: MC521|MC511 cache
        return self._mask_cache[n]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.in_proj(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self._look_ahead(n, x.device))  # also: MC521
        return self.out_proj(y.transpose(1, 2).reshape(b, n, d))


class MusicDecoder(nn.Module):
    def __init__(self, n_events: int = 388, dim: int = 32, heads: int = 4, depth: int = 2):
        super().__init__()
        self.embed = nn.Embedding(n_events, dim)
        self.pos = nn.Embedding(512, dim)
        self.layers = nn.ModuleList([EventAttention(dim, heads) for _ in range(depth)])
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, n_events)

    def forward(self, events: torch.Tensor) -> torch.Tensor:
        x = self.embed(events) + self.pos(torch.arange(events.shape[1], device=events.device))
        for attn, norm in zip(self.layers, self.norms):
            x = x + attn(norm(x))
        return self.head(x)
