"""Held-out 6 twin: the export-friendly decoder selecting -inf into a zero bias with `masked_fill`
instead of multiplying a 0/1 selector into -inf.

Source: the fix suggested in Jittor/jittor PR #423 ("use ternary op instead of multiply a mask
matrix") and made in tenstorrent/tt-metal#52038's fix (select instead of multiply).
"""

import math
from typing import Optional

import torch
import torch.nn as nn

NEG_INF = float("-inf")


def causal_bias(size: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """(size, size) additive bias, -inf above the diagonal; written without torch.where for export."""
    upper = torch.triu(torch.ones(size, size, device=device), diagonal=1)
    return torch.zeros(size, size, device=device).masked_fill(upper.bool(), NEG_INF)


class ExportableSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def padding_bias(self, keep: torch.Tensor) -> torch.Tensor:
        """(B, S) float 0/1 keep-mask -> (B, 1, 1, S) additive bias."""
        return torch.zeros_like(keep).masked_fill(keep == 0, NEG_INF)[:, None, None, :]

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores + causal_bias(n, x.device) + self.padding_bias(keep.to(x.dtype))
        attn = scores.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
