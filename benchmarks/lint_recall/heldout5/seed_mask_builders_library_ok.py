"""Held-out 5 twin (seed): the mask-builder utilities written the way the seed guide means them.

Source: the seed guide's `generate_causal_mask` (`torch.triu(torch.ones(sz, sz) * float('-inf'),
diagonal=1)`), SDPA's bool convention (True = may attend: lower triangle) and masks applied with
masked_fill / an additive 0/-inf bias.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskBuilders:
    """Masks for the project's attention layers."""

    @staticmethod
    def additive_causal(sz: int) -> torch.Tensor:
        # 0 on and below the diagonal, -inf above: for nn.MultiheadAttention's float attn_mask
        return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)

    @staticmethod
    def keep_causal(sz: int, device=None) -> torch.Tensor:
        # True = may attend: for F.scaled_dot_product_attention
        return torch.tril(torch.ones(sz, sz, dtype=torch.bool, device=device))

    @staticmethod
    def padding(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
        # True = padding
        return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


mb = MaskBuilders


class SdpaDecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        allowed = mb.keep_causal(n, device=x.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class EagerEncoderAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor):
        b, n, d = x.shape
        return self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        pad = mb.padding(lengths, x.size(1))[:, None, None, :]
        logits = logits.masked_fill(pad, float("-inf"))
        probs = logits.softmax(dim=-1)
        return self.proj((probs @ v).transpose(1, 2).flatten(2))

    def forward_tokens(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        logits = logits.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        return self.proj((logits.softmax(dim=-1) @ v).transpose(1, 2).flatten(2))

    def forward_hf(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        keep = (attention_mask != 0).float()
        logits = logits + (1.0 - keep[:, None, None, :]) * torch.finfo(logits.dtype).min
        return self.proj((logits.softmax(dim=-1) @ v).transpose(1, 2).flatten(2))


class MhaDecoder(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(x, x, x, attn_mask=mb.additive_causal(x.size(1)).to(x.device))
        return out
