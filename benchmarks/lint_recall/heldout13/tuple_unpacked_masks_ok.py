"""Held-out 13 (correct twin): a left-padded forecasting decoder (series of different lengths aligned on their
last step) whose mask helper returns a `(causal, padding)` tuple of additive masks that the layer
unpacks and sums.

Source: huggingface/transformers PR #27114 ("[AttentionMaskConverter] Fix-mask-inf") and
NVIDIA-NeMo/Automodel PR #2658 (a causal plane and a padding plane, each filled with
`torch.finfo(dtype).min`, added together: where a padded key is also a future key the sum
overflows to -inf, the value the finite minimum was chosen to avoid, and a padded query row no
longer spreads its weight evenly).
Twin: the two planes are combined with `torch.minimum`, which cannot overflow.
Surroundings: a helper returning two masks in a tuple, unpacked at the call, summed in the layer.
"""

from typing import Tuple

import torch
from torch import nn


def build_masks(lengths: torch.Tensor, n: int, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    neg = torch.finfo(dtype).min
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    causal = torch.zeros(n, n, dtype=dtype).masked_fill(future, neg)
    is_pad = torch.arange(n)[None, :] < (n - lengths)[:, None]  # left padding
    padding = torch.zeros(len(lengths), 1, 1, n, dtype=dtype).masked_fill(is_pad[:, None, None, :], neg)
    return causal, padding


class ForecastAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        causal, padding = build_masks(lengths, n, x.dtype)
        bias = torch.minimum(causal, padding)
        scores = q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5 + bias
        probs = scores.softmax(dim=-1)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, n, d)), probs


class Forecaster(nn.Module):
    def __init__(self, n_features: int = 3, dim: int = 32, heads: int = 4):
        super().__init__()
        self.inp = nn.Linear(n_features, dim)
        self.attn = ForecastAttention(dim, heads)
        self.head = nn.Linear(dim, 1)

    def forward(self, series: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h, _ = self.attn(self.inp(series), lengths)
        return self.head(h).squeeze(-1)
