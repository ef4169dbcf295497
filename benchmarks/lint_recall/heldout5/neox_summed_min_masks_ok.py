"""Held-out 5 twin: the NeoX-style model combining its masks before filling with the dtype minimum.

Source: the concern of EleutherAI/gpt-neox PR #25 answered by combining the bool masks first, so a
masked position holds one minimum, never a sum of two.
"""

import math

import torch
import torch.nn as nn


def prepare_attention_bias(pad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    n = pad.size(-1)
    min_value = torch.finfo(dtype).min
    future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=pad.device), 1)
    hidden = future[None, None] | pad[:, None, None, :]
    return torch.zeros(hidden.shape, dtype=dtype, device=pad.device).masked_fill(hidden, min_value)


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
        future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), 1)
        hidden = future | ~keep[:, None, None, :].bool()
        scores = scores.masked_fill(hidden, torch.finfo(scores.dtype).min)
        return self.dense((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
