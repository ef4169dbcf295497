"""Held-out 6: an export-friendly decoder that builds its causal and padding biases by multiplying a
0/1 selector into a matrix of -inf, because the target runtime has no `triu`/`where`.

Source: tenstorrent/tt-metal#52038 (`tril`/`triu` composed as `multiply(input, index_mask)`: an inf in
the masked region becomes NaN instead of 0, since `0 * -inf` is NaN) and Jittor/jittor PR #423
("support build triu/tril of an inf matrix": "the original implementation results in nan because
zeros * inf = nan. Suggest to use ternary op instead of multiply a mask matrix"). Here the same
composition is written by hand in PyTorch code meant for export.
Surroundings: a module-level constant for the masked value, a causal-bias helper that multiplies a
float `triu` selector into a full -inf matrix, a padding-bias method that multiplies `1 - keep` by the
constant, and the attention module adding both.
"""

import math
from typing import Optional

import torch
import torch.nn as nn

NEG_INF = float("-inf")


def causal_bias(size: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """(size, size) additive bias, -inf above the diagonal; written without torch.where for export."""
    upper = torch.triu(torch.ones(size, size, device=device), diagonal=1)
    return torch.full((size, size), NEG_INF, device=device) * upper  # expect: MC522 function


class ExportableSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def padding_bias(self, keep: torch.Tensor) -> torch.Tensor:
        """(B, S) float 0/1 keep-mask -> (B, 1, 1, S) additive bias."""
        return ((1.0 - keep) * NEG_INF)[:, None, None, :]  # expect: MC522 method

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores + causal_bias(n, x.device) + self.padding_bias(keep.to(x.dtype))
        attn = scores.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
