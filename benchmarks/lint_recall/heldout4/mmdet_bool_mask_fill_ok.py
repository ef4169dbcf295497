"""Held-out 4 twin: the bool masks are turned into float additive masks before the addition.

Source: open-mmlab/mmdetection#12351, pytorch/pytorch#109072 (the corrected reference:
`attn_bias.masked_fill_(attn_mask.logical_not(), float("-inf"))`).
"""

import math
from typing import Optional

import torch
import torch.nn as nn


class BiMultiHeadAttention(nn.Module):
    def __init__(self, v_dim: int, l_dim: int, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim**-0.5
        self.v_proj = nn.Linear(v_dim, embed_dim)
        self.l_proj = nn.Linear(l_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, v_dim)

    def forward(self, vision: torch.Tensor, lang: torch.Tensor, lang_lengths: torch.Tensor) -> torch.Tensor:
        bsz, tgt_len, _ = vision.shape
        src_len = lang.shape[1]
        query_states = self.v_proj(vision).view(bsz, tgt_len, self.num_heads, -1).transpose(1, 2) * self.scale
        key_states = self.l_proj(lang).view(bsz, src_len, self.num_heads, -1).transpose(1, 2)
        attn_weights = query_states @ key_states.transpose(-1, -2)
        keep = torch.arange(src_len, device=lang.device)[None, :] < lang_lengths[:, None]
        keep = keep[:, None, None, :].expand(bsz, 1, tgt_len, src_len)
        attention_mask = torch.zeros(keep.shape, dtype=attn_weights.dtype, device=keep.device)
        attention_mask = attention_mask.masked_fill(~keep, torch.finfo(attn_weights.dtype).min)
        attn_weights = attn_weights + attention_mask
        attn_probs = attn_weights.softmax(dim=-1)
        out = attn_probs @ self.l_proj(lang).view(bsz, src_len, self.num_heads, -1).transpose(1, 2)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, tgt_len, -1))


def reference_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    L, S = query.size(-2), key.size(-2)
    attn_bias = torch.zeros(L, S, dtype=query.dtype)
    if attn_mask is not None:
        attn_bias.masked_fill_(attn_mask.logical_not(), float("-inf"))
    attn_weight = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    attn_weight = torch.softmax(attn_weight + attn_bias, dim=-1)
    return attn_weight @ value


def demo() -> torch.Tensor:
    q = torch.randn(2, 4, 8)
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    return reference_attention(q, q, q, keep)
