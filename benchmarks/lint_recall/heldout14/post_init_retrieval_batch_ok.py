"""Held-out 14 (correct twin): the training code of a dense-retrieval bi-encoder (in-batch negatives). Batches
are dataclasses whose `__post_init__` derives the attention bias from the 0/1 `attention_mask`
that the collate function writes, and the encoder hands that bias to
`F.scaled_dot_product_attention`.

Source: pytorch/pytorch#103963 (a 0/1 float mask given to SDPA is additive: 1 adds +1 and
masks nothing), huggingface/transformers#46458 (a float 0.0 / 1.0 attention mask instead of
-inf / 0), conventions.md §2.9, `maskcheck explain MC508`.
Twin: the bias is the bool keep-mask (`.bool()`), which SDPA reads as True = attend.
Surroundings: a dataclass field computed in `__post_init__` from another field.
"""

from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class EncodedBatch:
    input_ids: torch.Tensor        # (B, L) int64
    attention_mask: torch.Tensor   # (B, L) int64, 1 = real token
    attn_bias: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.attn_bias = self.attention_mask[:, None, None, :].bool()


def collate(token_lists: List[List[int]], pad_id: int = 0) -> EncodedBatch:
    width = max(len(t) for t in token_lists)
    ids = torch.full((len(token_lists), width), pad_id, dtype=torch.long)
    for row, toks in enumerate(token_lists):
        ids[row, : len(toks)] = torch.tensor(toks)
    return EncodedBatch(input_ids=ids, attention_mask=(ids != pad_id).long())


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = self.ln1(x + self.out(y.transpose(1, 2).reshape(b, n, d)))
        return self.ln2(x + self.ff(x))


class BiEncoder(nn.Module):
    def __init__(self, vocab: int = 3000, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(256, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))

    def encode(self, batch: EncodedBatch) -> torch.Tensor:
        n = batch.input_ids.shape[1]
        x = self.embed(batch.input_ids) + self.pos(torch.arange(n))
        for layer in self.layers:
            x = layer(x, batch.attn_bias)
        keep = batch.attention_mask[..., None].float()
        return F.normalize((x * keep).sum(1) / keep.sum(1), dim=-1)

    def contrastive_loss(self, queries: EncodedBatch, passages: EncodedBatch, tau: float = 0.05):
        sim = self.encode(queries) @ self.encode(passages).T / tau
        return F.cross_entropy(sim, torch.arange(sim.shape[0]))
