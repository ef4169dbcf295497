"""Held-out 13: a config-driven NMT toolkit in which attention score functions are registered by
name with a decorator into a module-level registry and looked up from the model config.

Source: facebookresearch/ParlAI PR #3068 ("Fix masked_fill no-op"; only its title was read) and
`maskcheck explain MC525`: `masked_fill` (without the underscore) returns a new tensor, and called
as a statement its result is thrown away, so the source padding is never masked.
Surroundings: a decorator registry of scorer functions chosen by a config string.
"""

from typing import Callable, Dict

import torch
from torch import nn

SCORERS: Dict[str, Callable] = {}


def register_scorer(name: str):
    def wrap(fn):
        SCORERS[name] = fn
        return fn
    return wrap


@register_scorer("dot")
def dot_scores(query: torch.Tensor, keys: torch.Tensor, module: nn.Module) -> torch.Tensor:
    return torch.bmm(query, keys.transpose(1, 2))


@register_scorer("general")
def general_scores(query: torch.Tensor, keys: torch.Tensor, module: nn.Module) -> torch.Tensor:
    return torch.bmm(module.W(query), keys.transpose(1, 2))


class GlobalAttention(nn.Module):
    def __init__(self, dim: int, scorer: str = "general"):
        super().__init__()
        self.score_fn = SCORERS[scorer]
        self.W = nn.Linear(dim, dim, bias=False)
        self.out = nn.Linear(2 * dim, dim)

    def forward(self, dec: torch.Tensor, enc: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """dec (B, T, d), enc (B, S, d), src_mask (B, S) bool, True = real source token."""
        scores = self.score_fn(dec, enc, self)
        scores.masked_fill(~src_mask[:, None, :], float("-inf"))  # expect: MC525 registry
        attn = scores.softmax(dim=-1)
        context = torch.bmm(attn, enc)
        return torch.tanh(self.out(torch.cat([context, dec], dim=-1)))


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab: int = 90, tgt_vocab: int = 90, dim: int = 32, scorer: str = "general"):
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, dim, padding_idx=0)
        self.tgt_emb = nn.Embedding(tgt_vocab, dim, padding_idx=0)
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.decoder = nn.GRU(dim, dim, batch_first=True)
        self.attn = GlobalAttention(dim, scorer)
        self.gen = nn.Linear(dim, tgt_vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        enc, _ = self.encoder(self.src_emb(src))
        dec, _ = self.decoder(self.tgt_emb(tgt))
        return self.gen(self.attn(dec, enc, src != 0))
