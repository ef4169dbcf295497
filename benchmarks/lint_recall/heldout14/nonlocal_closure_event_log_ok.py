"""Held-out 14 (correct twin): a next-activity predictor for process mining (business event logs: one token
per activity of a case, e.g. "register", "check stock", "ship"). The look-ahead mask comes from
a provider closure that keeps the largest mask built so far in a `nonlocal` variable and
slices it for shorter cases.

Source: pytorch/pytorch#29546 ("Flipped look-ahead attention mask for transformer": the mask
ends up on the wrong side of the diagonal, early tokens see the future) and
`maskcheck explain MC521`: `masked_fill` hides where the mask is True, so a look-ahead mask for
it needs True above the diagonal; `tril(ones)` hides the past and the diagonal instead.
Twin: the provider builds `torch.triu(..., diagonal=1)` (True = future).
Surroundings: a closure factory with a `nonlocal` cache, stored on the module and called in
forward.
"""

from typing import Callable

import torch
from torch import nn


def make_lookahead_provider(device: torch.device) -> Callable[[int], torch.Tensor]:
    cached = torch.zeros(0, 0, dtype=torch.bool, device=device)

    def lookahead(n: int) -> torch.Tensor:
        nonlocal cached
        if cached.shape[0] < n:
            cached = torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)
        return cached[:n, :n]

    return lookahead


class EventAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, lookahead: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(lookahead, float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class NextActivityModel(nn.Module):
    def __init__(self, n_activities: int = 40, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(n_activities, dim)
        self.pos = nn.Embedding(128, dim)
        self.attn = nn.ModuleList(EventAttention(dim, heads) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, n_activities)
        self.lookahead = make_lookahead_provider(torch.device("cpu"))

    def forward(self, activities: torch.Tensor) -> torch.Tensor:
        n = activities.shape[1]
        x = self.embed(activities) + self.pos(torch.arange(n, device=activities.device))
        mask = self.lookahead(n)
        for attn, norm in zip(self.attn, self.norms):
            x = x + attn(norm(x), mask)
        return self.head(x)  # logits of the next activity at every step
