"""Held-out 7: diffusers-style attention processors (an `Attention` module whose processor is
swappable, a 2.0 processor built on SDPA and a sliced fallback for old torch).

Source: conventions.md section 2.7 (`is_causal=True` together with an attn_mask: MATH raises, CPU
flash ANDs them; here the flag is bound with functools.partial), the seed guide's "PyTorch mask is
additive, not multiplicative" (a bool padding mask added to einsum scores, built by a `lens`
helper), NVIDIA/apex#1052 and conventions.md section 2.3 (the float32 minimum written into an fp16
tensor, spelled `-torch.finfo(torch.float).max`).
Surroundings: functools.partial, einsum, a length-to-mask helper, in-place fill after a dtype cast.
"""

from functools import partial
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

sdpa_causal = partial(F.scaled_dot_product_attention, dropout_p=0.0, is_causal=True)


def lens_to_pad(lens: torch.Tensor, max_len: int) -> torch.Tensor:
    return torch.arange(max_len, device=lens.device)[None, :] >= lens[:, None]


class Attention(nn.Module):
    def __init__(self, query_dim: int, heads: int = 8, dim_head: int = 64, processor=None):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_k = nn.Linear(query_dim, inner, bias=False)
        self.to_v = nn.Linear(query_dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, query_dim), nn.Dropout(0.0)])
        self.processor = processor or CausalAttnProcessor2_0()

    def forward(self, hidden_states: torch.Tensor, encoder_lens: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.processor(self, hidden_states, encoder_lens)


class CausalAttnProcessor2_0:
    """Causal self-attention for the audio token decoder; padding comes from lengths."""

    def __call__(self, attn: Attention, hidden_states: torch.Tensor,
                 lens: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, _ = hidden_states.shape
        q = attn.to_q(hidden_states).view(b, n, attn.heads, -1).transpose(1, 2)
        k = attn.to_k(hidden_states).view(b, n, attn.heads, -1).transpose(1, 2)
        v = attn.to_v(hidden_states).view(b, n, attn.heads, -1).transpose(1, 2)
        keep = None
        if lens is not None:
            keep = ~lens_to_pad(lens, n)[:, None, None, :]
        out = sdpa_causal(q, k, v, attn_mask=keep)  # expect: MC506 alias
        out = out.transpose(1, 2).reshape(b, n, -1)
        return attn.to_out[1](attn.to_out[0](out))


class SlicedAttnProcessor:
    """Fallback for torch < 2.0: attention computed with einsum, one slice of the batch at a time."""

    def __init__(self, slice_size: int = 2):
        self.slice_size = slice_size

    def __call__(self, attn: Attention, hidden_states: torch.Tensor,
                 lens: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, _ = hidden_states.shape
        q, k, v = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
        pad = lens_to_pad(lens, n) if lens is not None else torch.zeros(b, n, dtype=torch.bool)
        outs = []
        for i in range(0, b, self.slice_size):
            sl = slice(i, i + self.slice_size)
            sim = torch.einsum("b i d, b j d -> b i j", q[sl], k[sl]) * attn.scale
            sim = sim + pad[sl, None, :]  # expect: MC509 closure
            outs.append(torch.einsum("b i j, b j d -> b i d", sim.softmax(dim=-1), v[sl]))
        return attn.to_out[0](torch.cat(outs))


class HalfPrecisionAttnProcessor:
    """Runs the score computation in fp16 to save memory on long sequences."""

    def __call__(self, attn: Attention, hidden_states: torch.Tensor,
                 lens: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, _ = hidden_states.shape
        q, k, v = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)
        sim = torch.baddbmm(torch.empty(b, n, n, device=q.device, dtype=q.dtype), q, k.transpose(-1, -2),
                            beta=0, alpha=attn.scale)
        sim = sim.to(torch.float16)
        if lens is not None:
            sim.masked_fill_(lens_to_pad(lens, n)[:, None, :], -torch.finfo(torch.float).max)  # expect: MC517 method
        probs = sim.softmax(dim=-1).to(v.dtype)
        return attn.to_out[0](torch.bmm(probs, v))
