"""Held-out 4 twin: the keep-mask is inverted before the fill, the padding mask is `seq ==
pad_idx`, and the integer mask is compared instead of bit-flipped.

Source: lucidrains/x-transformers#164, jadore801120/attention-is-all-you-need-pytorch#148,
PaddlePaddle/PaddleFormers#4033.
"""

from typing import Optional

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        sim = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if mask is not None:
            max_neg_value = -torch.finfo(sim.dtype).max
            sim = sim.masked_fill(~mask[:, None, None, :], max_neg_value)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


def get_pad_mask(seq: torch.Tensor, pad_idx: int) -> torch.Tensor:
    return (seq == pad_idx).unsqueeze(-2)


class Classifier(nn.Module):
    def __init__(self, vocab: int, dim: int, n_classes: int, pad_idx: int) -> None:
        super().__init__()
        self.pad_idx = pad_idx
        self.embed = nn.Embedding(vocab, dim)
        self.attn = Attention(dim)
        self.slf_attn = nn.MultiheadAttention(dim, 8, batch_first=True)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        x = x + self.attn(x, mask=attention_mask.bool())
        src_mask = get_pad_mask(input_ids, self.pad_idx)
        y, _ = self.slf_attn(x, x, x, key_padding_mask=src_mask.squeeze(1))
        return self.head(y.mean(dim=1))


def train_epoch(model: Classifier, loader, optimizer: torch.optim.Optimizer) -> None:
    model.train()
    for batch in loader:
        logits = model(batch["input_ids"], batch["attention_mask"])
        loss = nn.functional.cross_entropy(logits, batch["labels"])
        is_pad = batch["attention_mask"] == 0
        n_real = (~is_pad).sum()
        (loss * n_real / n_real.clamp(min=1)).backward()
        optimizer.step()
        optimizer.zero_grad()
