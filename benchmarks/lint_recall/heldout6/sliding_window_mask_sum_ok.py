"""Held-out 6 twin: the sliding-window decoder filling the padding positions into the causal plane
instead of adding a second plane of minima.

Source: the review on huggingface/transformers PR #31303 and the approach of the transformers mask
converter: fill one plane into the other, so a cell holds the minimum once.
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
        padded = attention_mask[:, None, None, :] == 0
        return causal.masked_fill(padded, torch.finfo(dtype).min)

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
