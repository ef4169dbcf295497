"""Held-out 7 (correct twin): a Hugging Face style encoder (config dataclass, SelfAttention / Layer / Model, a
batch-embedding helper that calls the tokenizer itself).

Source: NVIDIA/apex#1052 (masked_fill with -1e9 under fp16, written here with keyword arguments
`mask=` / `value=`), pytorch/pytorch#103963 and huggingface/transformers#32195 (a tokenizer's 0/1
attention_mask given to SDPA as a float, read here through `enc.attention_mask` attribute access
and `.to(dtype)`), conventions.md section 1 (`~` on an int64 tokenizer mask, written as
`torch.bitwise_not`).
Surroundings: dataclass config, keyword-argument masked_fill, attribute access on a BatchEncoding,
torch function instead of operator, type annotations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class EncoderConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_attention_heads: int = 6
    num_hidden_layers: int = 4
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0


class SelfAttention(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden: Tensor, keep: Optional[Tensor] = None) -> Tensor:
        q, k, v = map(self._split, self.qkv(hidden).chunk(3, dim=-1))
        logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if keep is not None:
            logits = logits.masked_fill(mask=~keep[:, None, None, :], value=torch.finfo(logits.dtype).min)
        probs = self.dropout(logits.softmax(dim=-1))
        ctx = (probs @ v).transpose(1, 2).flatten(2)
        return self.out(ctx)


class EncoderLayer(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(config)
        self.ln1 = nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))
        self.ln2 = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden: Tensor, keep: Optional[Tensor] = None) -> Tensor:
        hidden = self.ln1(hidden + self.attn(hidden, keep))
        return self.ln2(hidden + self.ffn(hidden))


class Encoder(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids: Tensor, keep: Optional[Tensor] = None) -> Tensor:
        hidden = self.embed(input_ids)
        for layer in self.layers:
            hidden = layer(hidden, keep)
        return hidden


@torch.no_grad()
def embed_batch(model: Encoder, tokenizer, texts: list[str]) -> Tensor:
    """Mean-pooled sentence vectors; the padding side does not matter."""
    enc = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    hidden = model.embed(enc.input_ids)
    b, n, d = hidden.shape
    q = k = v = hidden.view(b, n, 1, d).transpose(1, 2)
    bias = enc.attention_mask[:, None, None, :].bool()
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    ctx = ctx.transpose(1, 2).reshape(b, n, d)
    pad = torch.logical_not(enc["attention_mask"])
    ctx = ctx.masked_fill(pad.unsqueeze(-1), 0.0)
    return ctx.sum(1) / enc["attention_mask"].sum(1, keepdim=True)
