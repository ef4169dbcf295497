"""Held-out 5 (seed): a project's mask-builder utilities and the model layers that call them.

Source: seed article "解密PyTorch中的Self-Attention Mask机制" (/work/shared/seeds): `generate_causal_mask`
(`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)`, additive -inf/0 for MHA), its list of
common mistakes ("混淆mask的取值", "错误理解mask方向", "PyTorch中mask是加法而非乘法") and its Q1
("该用True的地方用了False"), moved into a utility class called from an SDPA decoder and an eager encoder.
Surroundings: static methods of a builder class used through an alias, a mask handed to SDPA from a
builder, masks added and filled in an eager attention.
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
        return torch.triu(torch.ones(sz, sz), diagonal=1) * float("-inf")  # expect: MC522 staticmethod

    @staticmethod
    def keep_causal(sz: int, device=None) -> torch.Tensor:
        # True = may attend: for F.scaled_dot_product_attention
        return torch.triu(torch.ones(sz, sz, dtype=torch.bool, device=device))  # expect: MC521 staticmethod

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
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # also: MC521
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
        logits = logits + pad  # expect: MC509 method
        probs = logits.softmax(dim=-1)
        return self.proj((probs @ v).transpose(1, 2).flatten(2))

    def forward_tokens(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        logits = logits.masked_fill(attention_mask.bool()[:, None, None, :], float("-inf"))  # expect: MC519 method
        return self.proj((logits.softmax(dim=-1) @ v).transpose(1, 2).flatten(2))

    def forward_hf(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        keep = (attention_mask != 0).float()
        logits = logits + keep[:, None, None, :]  # expect: MC508 method
        return self.proj((logits.softmax(dim=-1) @ v).transpose(1, 2).flatten(2))


class MhaDecoder(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(x, x, x, attn_mask=mb.additive_causal(x.size(1)).to(x.device))
        return out
