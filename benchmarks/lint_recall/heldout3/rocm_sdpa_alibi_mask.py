"""Held-out 3: an SDPA fallback that hands per-sequence ALiBi bias masks to SDPA together with
is_causal=True, and a prefix-LM block that keeps the causal flag while passing a mask.

Source: vllm-project/vllm PR #6043 (ROCm `_sdpa_attention` called SDPA with `is_causal=True` and
`attn_mask=attn_masks[i]`; review: "attn_mask doesn't work with is_causal=True", fixed with
`is_causal=attn_masks is None`), pytorch/pytorch#118972 (SDPA "errors if both attn_mask and
is_causal are set"), tinygrad/tinygrad PR #8675 (raises like torch; "fixed incorrect usage in tests").
Surroundings: a loop over packed sequences, a flag set in __init__, an ALiBi helper.
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
        biases.append(bias)
    return biases


def sdpa_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seq_lens: list[int],
                   num_heads: int, head_size: int, scale: float,
                   attn_masks: Optional[list[torch.Tensor]] = None) -> torch.Tensor:
    start = 0
    output = torch.empty((query.shape[1], num_heads, head_size), dtype=query.dtype, device=query.device)
    for i, seq_len in enumerate(seq_lens):
        end = start + seq_len
        sub_out = F.scaled_dot_product_attention(  # expect: MC506 loop
            query[:, start:end, :],
            key[:, start:end, :],
            value[:, start:end, :],
            dropout_p=0.0,
            is_causal=True,  # also: MC506
            attn_mask=attn_masks[i] if attn_masks else None,  # also: MC506
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
        self.is_causal = True

    def forward(self, x: torch.Tensor, prefix_len: int) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        keep[:, :prefix_len] = True
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=self.is_causal)  # expect: MC506 attribute
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


def alibi_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    n = q.size(-2)
    bias = make_alibi_bias(slopes, [n], q.dtype)[0]
    return F.scaled_dot_product_attention(q, k, v, bias, 0.0, True)  # expect: MC506 positional
