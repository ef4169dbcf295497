"""Two versions of one causal self-attention layer, for `maskcheck probe`:

    maskcheck probe examples/leaky_attention.py:make_leaky --causal
    maskcheck probe examples/leaky_attention.py:make_fixed --causal

`make_leaky` keeps the seed article's buffer (ones, filled in place with -1e9 above the
diagonal) and multiplies it into the scores: a score times -1e9 is hugely positive when the
score is negative, so those future keys win the softmax.
"""

from __future__ import annotations

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    embed_dim = 16  # the probe reads the input width from here

    def __init__(self, multiply_mask: bool, most: int = 64) -> None:
        super().__init__()
        self.qkv = nn.Linear(self.embed_dim, 3 * self.embed_dim)
        self.multiply_mask = multiply_mask
        self.register_buffer("mask", torch.ones(most, most))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / self.embed_dim ** 0.5
        if self.multiply_mask:
            future = torch.triu(torch.ones_like(self.mask), 1).bool()
            self.mask.masked_fill_(future, -1e9)  # maskcheck: ignore[MC501]
            scores = scores * self.mask[:length, :length]
        else:
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))  # padded keys
        return scores.softmax(-1) @ v


def make_leaky() -> nn.Module:
    return CausalSelfAttention(multiply_mask=True)


def make_fixed() -> nn.Module:
    return CausalSelfAttention(multiply_mask=False)
