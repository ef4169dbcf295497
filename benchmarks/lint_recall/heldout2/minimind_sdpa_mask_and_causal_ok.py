"""Held-out 2 (fixed twin): a causal SDPA call that either uses is_causal or folds causality into
the mask, never both.

Source: the fix of jingyaogong/minimind PR #536 (is_causal only when attn_mask is None) and
nari-labs/dia PR #170.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.dropout = dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        xq = self.wq(x).view(bsz, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(x).view(bsz, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        if self.flash and seq_len != 1:
            dropout_p = self.dropout if self.training else 0.0
            if attention_mask is None:
                output = F.scaled_dot_product_attention(xq, xk, xv, dropout_p=dropout_p, is_causal=True)
            else:
                causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).tril()
                pad = attention_mask.view(bsz, 1, 1, -1).bool()
                output = F.scaled_dot_product_attention(
                    xq, xk, xv, attn_mask=causal & pad, dropout_p=dropout_p, is_causal=False)
        else:
            scores = (xq @ xk.transpose(-2, -1)) / math.sqrt(self.head_dim)
            scores = scores + torch.triu(
                torch.full((seq_len, seq_len), float("-inf"), device=scores.device), diagonal=1)
            output = F.softmax(scores.float(), dim=-1).type_as(xq) @ xv
        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.wo(output)


class LanguageModelGroupedQueryAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, attention_mask=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        if attention_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, None, 0.0, T > 1)
        else:
            keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            keep = keep & attention_mask[:, None, None, :].bool()
            y = F.scaled_dot_product_attention(q, k, v, keep, 0.0, False)
        return y.transpose(1, 2).reshape(B, T, C)
