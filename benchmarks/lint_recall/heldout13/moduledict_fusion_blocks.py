"""Held-out 13: a retrieval-fusion encoder whose layers are picked from an `nn.ModuleDict` by a
layout string ("s" = self-attention block, "x" = cross-attention block over retrieved passages),
fed by a collate function that returns a dict batch with a HF-style `attention_mask`.

Source: conventions.md section 1 (nn.MultiheadAttention's `key_padding_mask` is True = padding,
a Hugging Face `attention_mask` is True / 1 = real token) and the seed guide's key_padding_mask
section ("True表示对应位置是padding"); the same confusion as the MHA example of
`maskcheck explain MC502`. Here the passages' keep-mask reaches the cross-attention block chosen
from the ModuleDict by key, so every real passage token is hidden and only the padding is read.
Surroundings: nn.ModuleDict of blocks chosen by key, a dict batch from a collate function.
"""

from typing import Dict, List

import torch
from torch import nn


def collate(queries: List[List[int]], passages: List[List[int]], pad_id: int = 0) -> Dict[str, torch.Tensor]:
    def pad(seqs):
        n = max(len(s) for s in seqs)
        return torch.tensor([s + [pad_id] * (n - len(s)) for s in seqs])

    q, p = pad(queries), pad(passages)
    return {"input_ids": q, "query_padding_mask": q == pad_id,
            "passage_ids": p, "attention_mask": p != pad_id}


class SelfBlock(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, memory, batch):
        out, _ = self.attn(x, x, x, key_padding_mask=batch["query_padding_mask"])
        return self.norm(x + out)


class CrossBlock(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, memory, batch):
        out, _ = self.attn(x, memory, memory, key_padding_mask=batch["attention_mask"])  # expect: MC502 module-dict
        return self.norm(x + out)


class FusionEncoder(nn.Module):
    def __init__(self, vocab: int = 100, d: int = 32, h: int = 4, layout: str = "sxsx"):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleDict({
            f"{i}_{kind}": (SelfBlock if kind == "s" else CrossBlock)(d, h)
            for i, kind in enumerate(layout)
        })

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.embed(batch["input_ids"])
        memory = self.embed(batch["passage_ids"])
        for key in self.blocks:
            x = self.blocks[key](x, memory, batch)
        return x
