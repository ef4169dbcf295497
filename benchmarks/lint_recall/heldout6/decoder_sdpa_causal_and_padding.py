"""Held-out 6: a decoder-only model's attention that passes its padding bias and the causal flag to
SDPA together.

Source: pytorch/pytorch#187801 ("scaled_dot_product_attention: no error raised when attn_mask and
is_causal are both set": the documentation says the call errors, the implementation accepts it;
checked on torch 2.13 CPU here: it returns without error and applies both, so a fully padded row
gives zeros, while the documented contract -- and other backends -- reject the pair).
Surroundings: a config dataclass holding `causal: bool = True`, the flag stored on the module in
__init__, an additive padding bias built by a helper from the tokenizer's mask, and SDPA called over
several lines with both keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DecoderConfig:
    d_model: int = 512
    n_heads: int = 8
    dropout: float = 0.0
    causal: bool = True


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, S) tokenizer mask -> (B, 1, 1, S) additive bias."""
    bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
    bias = bias.masked_fill(attention_mask == 0, torch.finfo(dtype).min)
    return bias[:, None, None, :]


class SelfAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout
        self.causal = cfg.causal

    def forward(self, x: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        bias = None if attention_mask is None else padding_bias(attention_mask, q.dtype)
        y = F.scaled_dot_product_attention(  # expect: MC506 dataclass-flag
            q, k, v,
            attn_mask=bias,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal,  # also: MC506
        )
        return self.out(y.transpose(1, 2).reshape(b, t, c))
