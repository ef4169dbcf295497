"""Held-out 7 (correct twin): a timm-style windowed attention block (Swin-like shifted windows, relative position
bias table, `register_buffer(..., persistent=False)`).

Source: the seed guide's `torch.triu(torch.ones(sz, sz) * float('-inf'))` family and
conventions.md section 2.3 (`0 * -inf` is NaN: here a 0/1 region mask times `-math.inf`), the seed
guide's "mask is additive, not multiplicative" (a 0/1 same-region matrix multiplied into the logits
before softmax), the seed article's buffer filled in place in forward (here through a local alias of
the buffer in a `forward_features` method).
Surroundings: timm naming, `@torch.jit.ignore` helpers, math.inf, method-chained softmax, an alias of
a buffer, persistent=False buffers.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def window_partition(x: torch.Tensor, window_size: int) -> torch.Tensor:
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size * window_size, C)


def shifted_window_bias(H: int, W: int, window_size: int, shift: int) -> torch.Tensor:
    img_mask = torch.zeros((1, H, W, 1))
    cnt = 0
    for h in (slice(0, -window_size), slice(-window_size, -shift), slice(-shift, None)):
        for w in (slice(0, -window_size), slice(-window_size, -shift), slice(-shift, None)):
            img_mask[:, h, w, :] = cnt
            cnt += 1
    mask_windows = window_partition(img_mask, window_size).squeeze(-1)
    other_region = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    return torch.zeros_like(other_region).masked_fill(other_region != 0, -math.inf)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size: Tuple[int, int] = (7, 7),
                 qkv_bias: bool = True, attn_drop: float = 0.0):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.window_size = window_size
        n = window_size[0] * window_size[1]
        self.relative_position_bias_table = nn.Parameter(torch.zeros(num_heads, n, n))
        self.register_buffer("window_bias", torch.zeros(n, n), persistent=False)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def _qkv(self, x: torch.Tensor):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        return qkv.unbind(0)

    def forward(self, x: torch.Tensor, region: Optional[torch.Tensor] = None) -> torch.Tensor:
        """region: (num_windows, N) region id of every token of a window."""
        B_, N, C = x.shape
        q, k, v = self._qkv(x)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn + self.relative_position_bias_table.unsqueeze(0)
        if region is not None:
            same = (region[:, :, None] == region[:, None, :]).float()
            nw = same.shape[0]
            attn = attn.view(B_ // nw, nw, self.num_heads, N, N).masked_fill(same.unsqueeze(1).unsqueeze(0) == 0, float("-inf"))
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)

    def forward_features(self, x: torch.Tensor, pad_tokens: torch.Tensor) -> torch.Tensor:
        """Variant for padded windows at the image border: pad_tokens (N,) is True on padding."""
        q, k, v = self._qkv(x)
        bias = self.window_bias.masked_fill(pad_tokens[None, :], float("-inf"))
        attn = (q @ k.transpose(-2, -1)) * self.scale + bias
        return self.proj((attn.softmax(-1) @ v).transpose(1, 2).flatten(2))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, input_resolution: Tuple[int, int], window_size: int = 7,
                 shift_size: int = 3):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, (window_size, window_size))
        self.window_size, self.shift_size = window_size, shift_size
        H, W = input_resolution
        self.register_buffer("attn_mask", shifted_window_bias(H, W, window_size, shift_size), persistent=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        shifted = torch.roll(self.norm1(x), shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        windows = window_partition(shifted, self.window_size)
        windows = self.attn(windows)
        x = x + windows.view(B, H, W, C)
        return x + self.mlp(self.norm2(x))
