"""Held-out 4 twin: with a cache the causal mask is built bottom-right aligned and passed as
`attn_mask`; `is_causal` only where the queries and keys are the same positions; the padding and
causal masks are combined into one boolean mask.

Source: pytorch/pytorch#110144, open-lm-engine/lm-engine#498, jingyaogong/minimind#497.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def bottom_right_keep(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(diagonal=kv_len - q_len)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, dropout: float = 0.0, causal: bool = True) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout
        self.causal = causal

    def forward(self, x: torch.Tensor, past_kv: Optional[tuple] = None, use_cache: bool = False):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        if past_kv is not None:
            past_k, past_v = past_kv
            k = torch.cat((past_k, k), dim=-2)
            v = torch.cat((past_v, v), dim=-2)
        present = (k, v) if use_cache else None
        keep = bottom_right_keep(t, k.size(-2), x.device) if self.causal else None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y), present


class SoftmaxAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, causal: bool = True, softmax_dropout_p: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.causal = causal
        self.softmax_dropout_p = softmax_dropout_p

    def forward(self, x: torch.Tensor, past_key_values: Optional[list] = None,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.c_attn(x).view(b, s, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        if past_key_values is not None:
            k = torch.cat([past_key_values[0], k], dim=2)
            v = torch.cat([past_key_values[1], v], dim=2)
            past_key_values[0], past_key_values[1] = k, v
        if attention_mask is None and self.causal:
            attention_mask = bottom_right_keep(s, k.size(2), x.device)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attention_mask,
            dropout_p=self.softmax_dropout_p if self.training else 0,
        )
        return self.c_proj(out.transpose(1, 2).reshape(b, s, h))


class MiniMindAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_local_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        xq = self.wq(x).view(bsz, seq_len, self.n_local_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seq_len, self.n_local_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(x).view(bsz, seq_len, self.n_local_heads, self.head_dim).transpose(1, 2)
        dropout_p = self.dropout if self.training else 0.0
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).tril()
        attn_mask = causal[None, None] & attention_mask.view(bsz, 1, 1, -1).bool()
        sdpa_kwargs = dict(attn_mask=attn_mask, dropout_p=dropout_p)
        output = F.scaled_dot_product_attention(xq, xk, xv, **sdpa_kwargs)
        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.wo(output)
