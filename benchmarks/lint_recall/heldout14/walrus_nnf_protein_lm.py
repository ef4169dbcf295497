"""Held-out 14: an autoregressive protein language model (ProGen-style, amino-acid tokens) that
imports `torch.nn.functional as nnf`. Batches of sequences of different lengths are right-padded;
the model picks the padding mask out of the batch dict with an assignment expression and
hands it to every block.

Source: conventions.md §2.7 and nari-labs/dia PR #170 (an explicit `attn_mask` together with
`is_causal=True`: the MATH backend raises "Explicit attn_mask should not be set when
is_causal=True", the CPU flash kernel ANDs the two), `maskcheck explain MC506`.
Surroundings: `import torch.nn.functional as nnf`, the mask taken with a walrus (`:=`) in forward.
"""

from typing import Dict, Optional

import torch
import torch.nn.functional as nnf
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        attn_mask = keep[:, None, None, :] if keep is not None else None
        y = nnf.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=True)  # expect: MC506 walrus
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, keep: Optional[torch.Tensor]) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), keep)
        return x + self.ff(self.ln2(x))


class ProteinLM(nn.Module):
    AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2, max_len: int = 1024):
        super().__init__()
        self.tok = nn.Embedding(len(self.AMINO_ACIDS) + 3, dim, padding_idx=0)  # pad, bos, eos
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, len(self.AMINO_ACIDS) + 3)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"]
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        keep = None
        if (padding_mask := batch.get("padding_mask")) is not None:
            keep = ~padding_mask  # padding_mask: True at pad residues
        for block in self.blocks:
            x = block(x, keep)
        return self.head(x)

    def loss(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self(batch)[:, :-1]
        return nnf.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:], ignore_index=0)
