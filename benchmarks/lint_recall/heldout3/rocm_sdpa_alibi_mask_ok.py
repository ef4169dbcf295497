"""Held-out 3 twin: SDPA gets either the causal flag or a mask that already holds the triangle.

Source: the fix of vllm-project/vllm PR #6043 (`is_causal=attn_masks is None`) and the SDPA
docstring (is_causal "errors if both attn_mask and is_causal are set").
"""

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_alibi_slopes(num_heads: int) -> torch.Tensor:
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    return torch.pow(torch.tensor(base), torch.arange(1, closest + 1))


def make_alibi_bias(slopes: torch.Tensor, seq_lens: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    biases = []
    for seq_len in seq_lens:
        pos = torch.arange(seq_len, dtype=dtype)
        rel = pos[None, :] - pos[:, None]
        bias = slopes[:, None, None] * rel[None, :, :]
        future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
        biases.append(bias.masked_fill(future, float("-inf")))
    return biases


def sdpa_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seq_lens: list[int],
                   num_heads: int, head_size: int, scale: float,
                   attn_masks: Optional[list[torch.Tensor]] = None) -> torch.Tensor:
    start = 0
    output = torch.empty((query.shape[1], num_heads, head_size), dtype=query.dtype, device=query.device)
    for i, seq_len in enumerate(seq_lens):
        end = start + seq_len
        sub_out = F.scaled_dot_product_attention(
            query[:, start:end, :],
            key[:, start:end, :],
            value[:, start:end, :],
            dropout_p=0.0,
            is_causal=attn_masks is None,
            attn_mask=attn_masks[i] if attn_masks else None,
            scale=scale,
        ).movedim(query.dim() - 2, 0)
        output[start:end, :, :] = sub_out
        start = end
    return output


class PrefixLMBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, prefix_len: int) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        keep[:, :prefix_len] = True
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


def alibi_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    n = q.size(-2)
    bias = make_alibi_bias(slopes, [n], q.dtype)[0]
    return F.scaled_dot_product_attention(q, k, v, bias, 0.0, False)
