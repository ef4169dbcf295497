"""Held-out 13 (correct twin): a session-based recommender (SASRec-like) trained from a generator that yields
padded batches of item sessions; the collator writes the mask as a tokenizer would, int64 1 / 0.

Source: conventions.md section 1 (a tokenizer's `attention_mask` is int64, 1 = real item; HF
direction table) and the int-mask inversion of `maskcheck explain MC518`: `~` on the int64 mask
gives -2 / -1, which nn.MultiheadAttention rejects ("only bool and floating types of
key_padding_mask are supported").
Twin: the int64 mask is inverted with `== 0`, giving a bool True = padding mask.
Surroundings: a generator (`yield`) collator producing the mask, a training loop over it.
"""

import random
from typing import Dict, Iterator, List

import torch
from torch import nn


def session_batches(sessions: List[List[int]], batch_size: int, shuffle: bool = True) -> Iterator[Dict[str, torch.Tensor]]:
    order = list(range(len(sessions)))
    if shuffle:
        random.shuffle(order)
    for start in range(0, len(order), batch_size):
        chunk = [sessions[i] for i in order[start:start + batch_size]]
        width = max(len(s) for s in chunk) - 1
        inputs = [s[:-1] + [0] * (width - len(s) + 1) for s in chunk]
        targets = [s[1:] + [0] * (width - len(s) + 1) for s in chunk]
        mask = [[1] * (len(s) - 1) + [0] * (width - len(s) + 1) for s in chunk]
        yield {"items": torch.tensor(inputs), "targets": torch.tensor(targets),
               "attention_mask": torch.tensor(mask)}


class SessionEncoder(nn.Module):
    def __init__(self, n_items: int = 1000, dim: int = 32, heads: int = 2, max_len: int = 50):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.out = nn.Linear(dim, n_items)

    def forward(self, items: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        n = items.shape[1]
        x = self.item_emb(items) + self.pos_emb(torch.arange(n, device=items.device))
        future = torch.ones(n, n, dtype=torch.bool, device=items.device).triu(1)
        h, _ = self.attn(x, x, x, attn_mask=future, key_padding_mask=attention_mask == 0)
        return self.out(x + self.ff(h))


def train_epoch(model: SessionEncoder, sessions: List[List[int]], opt: torch.optim.Optimizer) -> float:
    total = 0.0
    for batch in session_batches(sessions, batch_size=4):
        logits = model(batch["items"], batch["attention_mask"])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total
