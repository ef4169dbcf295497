"""Held-out 14: a character-level OCR post-correction model (GRU encoder, GRU decoder with
Bahdanau attention over the noisy line). The batch masks travel together in a
`typing.NamedTuple`, built once per batch by `make_masks`.

Source: emanjavacas/pie PR #37 and nlpyang/BertSum#73 (`1 - mask` on a bool mask made with a
comparison: "Subtraction, the `-` operator, with a bool tensor is not supported"), and
`maskcheck explain MC512`. Here the bool keep-mask is the NamedTuple's `src_keep` field and the
attention inverts it with `1 - masks.src_keep` for its masked_fill condition.
Surroundings: a `typing.NamedTuple` of masks read by attribute.
"""

from typing import NamedTuple

import torch
from torch import nn


class Masks(NamedTuple):
    src_keep: torch.Tensor   # (B, S) bool, True = real character
    tgt_keep: torch.Tensor   # (B, T) bool, True = real character


def make_masks(src: torch.Tensor, tgt: torch.Tensor, pad_id: int = 0) -> Masks:
    return Masks(src_keep=src != pad_id, tgt_keep=tgt != pad_id)


class BahdanauAttention(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.w_query = nn.Linear(dim, dim, bias=False)
        self.w_keys = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, 1, bias=False)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, masks: Masks) -> torch.Tensor:
        # query (B, D), keys (B, S, D)
        energy = self.v(torch.tanh(self.w_query(query)[:, None] + self.w_keys(keys))).squeeze(-1)
        energy = energy.masked_fill(1 - masks.src_keep, float("-inf"))  # expect: MC512 namedtuple
        weights = energy.softmax(dim=-1)
        return torch.bmm(weights[:, None], keys).squeeze(1)


class OCRCorrector(nn.Module):
    def __init__(self, n_chars: int = 120, dim: int = 64):
        super().__init__()
        self.embed = nn.Embedding(n_chars, dim, padding_idx=0)
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.decoder = nn.GRUCell(2 * dim, dim)
        self.attention = BahdanauAttention(dim)
        self.out = nn.Linear(2 * dim, n_chars)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        masks = make_masks(src, tgt_in)
        keys, _ = self.encoder(self.embed(src))
        state = keys.new_zeros(keys.shape[0], keys.shape[2])
        logits = []
        for t in range(tgt_in.shape[1]):
            context = self.attention(state, keys, masks)
            state = self.decoder(torch.cat([self.embed(tgt_in[:, t]), context], -1), state)
            logits.append(self.out(torch.cat([state, context], -1)))
        logits = torch.stack(logits, 1)
        return logits.masked_fill(~masks.tgt_keep[..., None], 0.0)
