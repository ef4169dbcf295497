"""Held-out twin: the pair model with key-only padding, SDPA-shaped masks, an additive pair bias,
and an out-of-place prompt mask.

Source: the fix of Biohub/esm#299 and conventions.md 2.6.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class PairBias(nn.Module):
    def __init__(self, c_pair: int, heads: int) -> None:
        super().__init__()
        self.proj = nn.Linear(c_pair, heads, bias=False)

    def forward(self, pair: torch.Tensor, seq_mask: torch.Tensor) -> torch.Tensor:
        bias = self.proj(pair).permute(0, 3, 1, 2)
        pad_bias = torch.zeros_like(seq_mask, dtype=bias.dtype).masked_fill(~seq_mask, float("-inf"))
        return bias + pad_bias[:, None, None, :]


class ResidueAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.prompt = nn.Parameter(torch.randn(4, dim))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, seq_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = map(self._heads, self.qkv(x).chunk(3, dim=-1))
        logits = q @ k.transpose(-1, -2) * q.size(-1) ** -0.5
        logits = logits.masked_fill(~seq_mask[:, None, None, :], float("-inf"))
        return F.softmax(logits, dim=-1) @ v

    def forward_sdpa(self, x: torch.Tensor, seq_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = map(self._heads, self.qkv(x).chunk(3, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=seq_mask[:, None, None, :])

    def drop_prompt_tokens(self, which: torch.Tensor) -> torch.Tensor:
        return self.prompt.masked_fill(which[:, None], 0.0)
