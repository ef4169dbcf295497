"""Held-out 13: a small captioning decoder on nn.TransformerDecoder whose look-ahead mask comes from
a module-level helper memoised with `functools.lru_cache` (one tensor per length, shared by every
call).

Source: the seed guide's `generate_causal_mask` (`torch.triu(torch.ones(sz, sz) * float('-inf'),
diagonal=1)`) with the two operations swapped: the 0/1 triangle is multiplied by -inf after
`triu`, and 0 * -inf is NaN (conventions.md section 2.3; `maskcheck explain MC522`), so every cell
on and below the diagonal is NaN and so is every output.
Surroundings: an lru_cache'd mask builder, nn.TransformerDecoder with `tgt_mask=`.
"""

import functools

import torch
from torch import nn


@functools.lru_cache(maxsize=16)
def subsequent_mask(size: int) -> torch.Tensor:
    return torch.triu(torch.ones(size, size), diagonal=1) * float("-inf")  # expect: MC522 lru-cache


class CaptionDecoder(nn.Module):
    def __init__(self, vocab: int = 200, d_model: int = 32, nhead: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, 64, d_model))
        layer = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor, image_feats: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:, :n]
        x = self.decoder(x, image_feats, tgt_mask=subsequent_mask(n))
        return self.out(x)


class Captioner(nn.Module):
    def __init__(self, feat_dim: int = 48, d_model: int = 32):
        super().__init__()
        self.visual = nn.Linear(feat_dim, d_model)
        self.decoder = CaptionDecoder(d_model=d_model)

    def forward(self, regions: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(tokens, self.visual(regions))

    @torch.no_grad()
    def greedy(self, regions: torch.Tensor, bos: int = 1, steps: int = 8) -> torch.Tensor:
        tokens = torch.full((regions.shape[0], 1), bos, dtype=torch.long)
        for _ in range(steps):
            nxt = self(regions, tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens
