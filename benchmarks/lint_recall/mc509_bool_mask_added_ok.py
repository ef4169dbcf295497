"""MC509 correct twin: bool masks select (masked_fill / where); only float masks are added.

Source: the fix for conventions.md 2.9 (transformers' `eager_mask` builds 0 / finfo.min with torch.where).
"""

import torch
import torch.nn as nn

scores = torch.randn(1, 4, 4)
causal = torch.ones(4, 4, dtype=torch.bool).tril()
scores = scores.masked_fill(~causal, float("-inf"))
count = causal.sum() + causal.int()


class EagerAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.out = nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int) -> torch.Tensor:
        attn_weights = q @ k.transpose(2, 3)
        causal_mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        bias = torch.where(causal_mask, 0.0, torch.finfo(attn_weights.dtype).min)
        attn_weights = attn_weights + bias
        return attn_weights.softmax(-1) @ v


def window_bias(n: int, w: int):
    idx = torch.arange(n)
    inside = (idx[:, None] - idx[None, :]).abs() <= w

    def apply(s: torch.Tensor) -> torch.Tensor:
        s = s.masked_fill(~inside, float("-inf"))
        return s.softmax(-1)

    return apply


positions = torch.arange(4) + torch.ones(4, dtype=torch.bool).cumsum(0)
