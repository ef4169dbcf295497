"""Review-sentiment encoder as a LightningModule on nn.MultiheadAttention; the collate function
returns a TypedDict with the tokenizer's fields, and every signature is annotated.

Source: conventions.md §1 (nn.MultiheadAttention row and the direction cheat-sheet), seed
self_attention_mask_guide.txt §2, pytorch/pytorch PR #141694.
"""

from __future__ import annotations

from typing import Optional, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:
    from lightning import LightningModule
except ImportError:  # not installed in this venv: a minimal stand-in

    class LightningModule(nn.Module):  # type: ignore[no-redef]
        def log(self, name: str, value: Tensor, **kwargs: object) -> None:
            print(f"{name}={float(value.detach()):.4f}")


class Batch(TypedDict):
    input_ids: Tensor
    attention_mask: Tensor
    labels: Tensor


def collate(rows: list[list[int]], labels: list[int], pad_id: int = 0) -> Batch:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return Batch(input_ids=ids, attention_mask=(ids != pad_id).long(), labels=torch.tensor(labels))


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        h = self.norm1(x)
        a, _ = self.attn(h, h, h, key_padding_mask=None if attention_mask is None else ~attention_mask, need_weights=False)
        x = x + a
        return x + self.ff(self.norm2(x))


class SentimentModel(LightningModule):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(16, dim) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, 2)

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        keep = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        x = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        for block in self.blocks:
            x = block(x, attention_mask=keep)
        w = keep.unsqueeze(-1).to(x.dtype)
        return self.head((x * w).sum(1) / w.sum(1))

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self(batch["input_ids"], batch["attention_mask"]), batch["labels"])
        self.log("train_loss", loss)
        return loss


def main() -> None:
    torch.manual_seed(0)
    model = SentimentModel()
    rows = [[5, 9, 14, 3], [7, 21, 4, 30, 11, 2], [8, 8, 19]]
    batch = collate(rows, [1, 0, 1])
    model.train()
    model.training_step(batch, 0)
    model.eval()
    with torch.no_grad():
        batched = model(batch["input_ids"], batch["attention_mask"])
        for i, r in enumerate(rows):
            alone = collate([r], [0])
            single = model(alone["input_ids"], alone["attention_mask"])
            print(f"review {i}: batched vs alone max diff {(batched[i] - single[0]).abs().max().item():.3g}")
        junk = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, 33)
        moved = (model(junk, batch["attention_mask"]) - batched).abs().max().item()
        print(f"padding ids 0 -> 33 moves the logits by {moved:.3g}")


if __name__ == "__main__":
    main()
