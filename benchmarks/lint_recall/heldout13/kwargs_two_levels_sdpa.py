"""Held-out 13: a small chat model whose top-level forward collects the attention options in one
dict and hands it down as `**attn_kwargs` through the decoder layer to the attention module, which
forwards it untouched to F.scaled_dot_product_attention.

Source: conventions.md section 2.7 (`is_causal=True` together with an explicit `attn_mask`: the MATH
backend raises "_scaled_dot_product_attention: Explicit attn_mask should not be set when
is_causal=True", the CPU flash default ANDs them) and nari-labs/dia PR #170 (a padding mask and
`is_causal=True` passed together). Here both sit in the same kwargs dict.
Surroundings: keyword arguments collected in a dict and passed down two levels as **kwargs.
"""

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.wqkv(x).view(b, n, 3, self.heads, -1).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kwargs)  # expect: MC506 kwargs
        return self.wo(y.transpose(1, 2).reshape(b, n, d))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), **kwargs)
        return x + self.mlp(self.norm2(x))


class ChatModel(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 32, heads: int = 4, depth: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, heads) for _ in range(depth)])
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keep = attention_mask.bool()[:, None, None, :]
        attn_kwargs = {"attn_mask": keep, "dropout_p": 0.0, "is_causal": True}  # also: MC506
        x = self.tok(input_ids)
        for layer in self.layers:
            x = layer(x, **attn_kwargs)
        return self.lm_head(x)
