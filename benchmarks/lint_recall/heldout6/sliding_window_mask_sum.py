"""Held-out 6: a Mistral-style decoder's eager mask builder that adds a sliding-window causal plane
and a padding plane, each filled with the dtype's minimum, and hands the sum to SDPA in bfloat16.

Source: huggingface/transformers PR #31303 ("fix overflow for bfloat16 when using cuda kernel": with
`torch.finfo(dtype).min` in both the causal and the padding part, their sum overflows to -inf in
bfloat16 under `F.scaled_dot_product_attention`; the PR halves the value, the review asks for the
planes to be combined without adding two minima).
Surroundings: a config with a sliding window, a causal-plane builder and a padding-plane builder as
separate functions, the model method adding them, and the attention module consuming the result.
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_sliding_window_causal_plane(seq_len: int, window: int, dtype: torch.dtype,
                                     device: torch.device) -> torch.Tensor:
    min_value = torch.finfo(dtype).min
    plane = torch.full((seq_len, seq_len), min_value, dtype=dtype, device=device)
    plane = torch.triu(plane, diagonal=1)
    too_far = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=-window)
    plane = plane.masked_fill(too_far, min_value)
    return plane[None, None, :, :]


def make_padding_plane(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    inverted = 1.0 - attention_mask[:, None, None, :].to(dtype)
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class SlidingWindowDecoder(nn.Module):
    def __init__(self, layers: nn.ModuleList, sliding_window: int = 4096) -> None:
        super().__init__()
        self.layers = layers
        self.sliding_window = sliding_window

    def _update_causal_mask(self, attention_mask: Optional[torch.Tensor],
                            hidden_states: torch.Tensor) -> torch.Tensor:
        dtype, device = hidden_states.dtype, hidden_states.device
        causal = make_sliding_window_causal_plane(hidden_states.shape[1], self.sliding_window, dtype, device)
        if attention_mask is None:
            return causal
        padding = make_padding_plane(attention_mask, dtype)
        return causal + padding  # expect: MC513 helpers

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        mask = self._update_causal_mask(attention_mask, hidden_states)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attn_mask=mask)
        return hidden_states


class SdpaAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, n, d))
