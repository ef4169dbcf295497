"""Held-out 4: decoder attention over a KV cache with scaled_dot_product_attention's `is_causal`
flag (top-left aligned when the keys include the cache), and `is_causal=True` next to an explicit
`attn_mask`.

Source: pytorch/pytorch#110144 (with a KV cache and more than one new token, `is_causal=True`
masks the cached keys: the mask is aligned top-left), open-lm-engine/lm-engine#498 (review of
`is_causal=self.causal if attention_mask is None else False` on keys that come from the cache),
jingyaogong/minimind#497 (`attn_mask` and `is_causal=True` passed together to the flash path).
Surroundings: the flag as a module attribute, a conditional flag, the SDPA arguments gathered in
a kwargs dict.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


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
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal)  # expect: MC510 attribute-flag
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
        out = F.scaled_dot_product_attention(  # expect: MC510 conditional-flag
            q,
            k,
            v,
            attn_mask=attention_mask,
            dropout_p=self.softmax_dropout_p if self.training else 0,
            is_causal=self.causal if attention_mask is None else False,  # also: MC510
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
        attn_mask = attention_mask.view(bsz, 1, 1, -1).expand(bsz, self.n_local_heads, seq_len, -1).bool()
        sdpa_kwargs = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=True)
        output = F.scaled_dot_product_attention(xq, xk, xv, **sdpa_kwargs)  # expect: MC506 kwargs-dict
        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.wo(output)
