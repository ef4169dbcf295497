"""Held-out 5: a GPT-NeoX-style model adding a causal bias and a padding bias both at the dtype minimum.

Source: EleutherAI/gpt-neox PR #25 ("because the mask is now added rather than used as a boolean fill,
a max negative value for the mask may lead to overflow. decrease by factor of 2").
Surroundings: a mask-preparation function of the model, an attention forward that sums its two biases.
"""

import math

import torch
import torch.nn as nn


def prepare_attention_bias(pad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    n = pad.size(-1)
    min_value = torch.finfo(dtype).min
    future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=pad.device), 1)
    causal_bias = torch.zeros(n, n, dtype=dtype, device=pad.device).masked_fill(future, min_value)
    pad_bias = torch.zeros(pad.shape, dtype=dtype, device=pad.device).masked_fill(pad, min_value)
    return causal_bias[None, None] + pad_bias[:, None, None, :]  # expect: MC513 function


class NeoXAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        neg = torch.finfo(scores.dtype).min
        causal = torch.triu(torch.full((n, n), neg, dtype=scores.dtype, device=x.device), 1)
        padding = (1.0 - keep[:, None, None, :].to(scores.dtype)) * neg
        scores = scores + causal + padding  # expect: MC513 method
        return self.dense((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
