"""Held-out 4 (written after the fixes; see README.md): the vision-language fusion attention of a
detector: a boolean attention mask is "filled" with a large negative value, which a bool tensor
cannot hold (it stays bool, True everywhere it was filled), and the result is added to the
attention weights.

Source: open-mmlab/mmdetection#12351 (BiMultiHeadAttention: `attention_mask.masked_fill(
attention_mask == 0, -9e15)` on a bool mask returns a bool tensor, and `attn_weights + attention_mask`
adds 1 where positions should be ignored), pytorch/pytorch#109072 (the SDPA reference code
`attn_mask.masked_fill_(attn_mask.logical_not(), float("-inf"))` on a bool mask, then
`attn_bias += attn_mask` read as the way to apply it).
Surroundings: a bool mask built from the text lengths in a method, filled and added; a
reference-attention helper that adds a bool mask it filled in place.
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
        attention_mask = torch.arange(src_len, device=lang.device)[None, :] < lang_lengths[:, None]
        attention_mask = attention_mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len)
        attention_mask = attention_mask.masked_fill(attention_mask == 0, -9e15)
        attn_weights = attn_weights + attention_mask  # expect: MC509 filled-bool
        attn_probs = attn_weights.softmax(dim=-1)
        out = attn_probs @ self.l_proj(lang).view(bsz, src_len, self.num_heads, -1).transpose(1, 2)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, tgt_len, -1))


def reference_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    L, S = query.size(-2), key.size(-2)
    attn_bias = torch.zeros(L, S, dtype=query.dtype)
    if attn_mask is not None:
        attn_mask = attn_mask.clone()
        attn_mask.masked_fill_(attn_mask.logical_not(), float("-inf"))
        attn_bias += attn_mask  # expect: MC509 reference-helper
    attn_weight = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    attn_weight = torch.softmax(attn_weight + attn_bias, dim=-1)
    return attn_weight @ value


def demo() -> torch.Tensor:
    q = torch.randn(2, 4, 8)
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    return reference_attention(q, q, q, keep)  # also: MC509
