"""Held-out 6 twin: the decoder folding the causal plane into its padding bias (filled, not added)
and passing the flag only when there is no explicit mask.

Source: the documented contract quoted on pytorch/pytorch#187801 (`is_causal` errors if an
`attn_mask` is also set): one or the other, never both.
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
        dropout_p = self.dropout if self.training else 0.0
        if attention_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=self.causal)
        else:
            bias = padding_bias(attention_mask, q.dtype)
            if self.causal:
                future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                bias = bias.masked_fill(future, torch.finfo(q.dtype).min)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
        return self.out(y.transpose(1, 2).reshape(b, t, c))
