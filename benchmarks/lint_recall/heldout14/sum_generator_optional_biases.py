"""Held-out 14: a small decoder-only model for batched text-to-SQL generation. Prompts are
left-padded, and several prompts may be packed into one row with `segment_ids`; each attention
bias (causal, padding, optional segment) is an additive 0 / finfo.min plane, and the model
combines whichever are present with `sum(...)` over a generator expression.

Source: huggingface/transformers PR #27114 ("[AttentionMaskConverter] Fix-mask-inf") and
NVIDIA-NeMo/Automodel PR #2658 (a causal finfo.min plane and a padding finfo.min plane added:
the overlap overflows to -inf), conventions.md §2.3, `maskcheck explain MC513`.
Surroundings: optional masks combined by the builtin `sum` over a generator that skips None.
"""

from typing import Optional

import torch
from torch import nn


def causal_bias(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    future = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
    return torch.zeros(n, n, dtype=dtype, device=device).masked_fill(future, torch.finfo(dtype).min)


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    pad = (attention_mask == 0)[:, None, None, :]
    zeros = torch.zeros(pad.shape, dtype=dtype, device=attention_mask.device)
    return zeros.masked_fill(pad, torch.finfo(dtype).min)


def segment_bias(segment_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    other = segment_ids[:, None, :, None] != segment_ids[:, None, None, :]
    zeros = torch.zeros(other.shape, dtype=dtype, device=segment_ids.device)
    return zeros.masked_fill(other, torch.finfo(dtype).min)


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + bias
        attn = scores.softmax(dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class SQLDecoder(nn.Module):
    def __init__(self, vocab: int = 300, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(512, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(layers))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                segment_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        n = input_ids.shape[1]
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        x = self.embed(input_ids) + self.pos(positions)
        biases = (
            causal_bias(n, x.dtype, x.device),
            padding_bias(attention_mask, x.dtype),
            segment_bias(segment_ids, x.dtype) if segment_ids is not None else None,
        )
        bias = sum(b for b in biases if b is not None)  # expect: MC513 sum-generator
        for layer in self.layers:
            x = layer(x, bias)
        return self.lm_head(x)
