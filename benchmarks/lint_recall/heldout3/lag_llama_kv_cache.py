"""Held-out 3: a time-series decoder (Lag-Llama style) whose SDPA call keeps is_causal=True once
keys come from a KV cache, and a Llama-style attention reading keys back from cache buffers.

Source: time-series-foundation-models/lag-llama#81 and PR #84 ("F.scaled_dot_product_attention ...
appears to give completely incorrect results even when is_causal=True is set when using kv_cache"),
lucidrains/x-transformers#187 (SDPA's top-left causal corner "improperly mask[s] out caches" when
len(q) = 1; workaround `is_causal = causal and q.shape[2] >= k.shape[2]`).
Surroundings: a forward with a cache concatenation, a static cache sliced from buffers, a helper
called from a generate loop.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head = n_head
        self.n_embd = n_embd
        self.dropout = dropout
        self.kv_cache: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    def forward(self, x: torch.Tensor, use_kv_cache: bool = False) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if use_kv_cache:
            if self.kv_cache is not None:
                cached_k, cached_v = self.kv_cache
                k = torch.cat([cached_k, k], dim=-2)
                v = torch.cat([cached_v, v], dim=-2)
            self.kv_cache = (k, v)
        y = F.scaled_dot_product_attention(  # expect: MC510 method
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True  # also: MC510
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def reset_cache(self) -> None:
        self.kv_cache = None


class LlamaStyleAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, max_batch: int, max_seq: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.register_buffer("cache_k", torch.zeros(max_batch, n_heads, max_seq, self.head_dim), persistent=False)
        self.register_buffer("cache_v", torch.zeros(max_batch, n_heads, max_seq, self.head_dim), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        self.cache_k[:bsz, :, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, :, start_pos : start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, :, : start_pos + seqlen]
        values = self.cache_v[:bsz, :, : start_pos + seqlen]
        out = F.scaled_dot_product_attention(xq, keys, values, is_causal=True)  # expect: MC510 buffer-cache
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, -1))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def decode_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cache: Optional[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    if cache is not None:
        ck, cv = cache
        k = torch.cat((ck, k), dim=-2)
        v = torch.cat((cv, v), dim=-2)
    out = attend(q, k, v, True)  # expect: MC510 helper
    return out, (k, v)


@torch.no_grad()
def generate(model: nn.Module, past_target: torch.Tensor, prediction_length: int) -> torch.Tensor:
    for block in model.modules():
        if isinstance(block, CausalSelfAttention):
            block.reset_cache()
    out = past_target
    step_input = past_target
    for _ in range(prediction_length):
        params = model(step_input, use_kv_cache=True)
        nxt = params[:, -1:]
        out = torch.cat([out, nxt], dim=1)
        step_input = nxt
    return out
