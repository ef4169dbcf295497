"""Captioning-style decoder: nn.TransformerDecoder over image features, masks from a builder.

`CausalMaskBuilder` is a small callable object that caches look-ahead masks per length;
`CaptionDecoder` calls `self.mask_builder(T)` for `tgt_mask`. nn.TransformerDecoder's bool
`tgt_mask` means True = this position is NOT allowed to attend (the future must be True,
as in `nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool)`).

Source: pytorch/pytorch#29546 (flipped look-ahead mask), rasbt/LLMs-from-scratch#1061,
conventions.md §1 (nn.Transformer row and direction cheat-sheet) and §3 items 9 and 14.
"""
from typing import Dict

import torch
import torch.nn as nn


class CausalMaskBuilder:
    """mask = builder(T): bool (T, T) look-ahead mask, True = masked (nn.Transformer style)."""

    def __init__(self):
        self._cache: Dict[int, torch.Tensor] = {}

    def __call__(self, size: int, device=None) -> torch.Tensor:
        if size not in self._cache:
            mask = torch.tril(torch.ones(size, size, dtype=torch.bool))  # expect: MC521 callable
            self._cache[size] = mask
        return self._cache[size].to(device)


class CaptionDecoder(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4, layers: int = 2,
                 max_len: int = 16, feat_dim: int = 48):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.feat_proj = nn.Linear(feat_dim, dim)
        layer = nn.TransformerDecoderLayer(dim, heads, 64, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.out = nn.Linear(dim, vocab)
        self.mask_builder = CausalMaskBuilder()

    def forward(self, tokens, features):
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        memory = self.feat_proj(features)
        tgt_mask = self.mask_builder(t, device=tokens.device)
        h = self.decoder(x, memory, tgt_mask=tgt_mask)
        return self.out(h)

    @torch.no_grad()
    def greedy(self, features, bos: int = 1, steps: int = 5):
        tokens = torch.full((features.shape[0], 1), bos, dtype=torch.long)
        for _ in range(steps):
            nxt = self(tokens, features)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CaptionDecoder().train()  # training-mode path, as in teacher forcing
    feats = torch.randn(2, 10, 48)
    caption = torch.tensor([[1, 7, 9, 4, 2, 0], [1, 5, 5, 8, 3, 2]])
    with torch.no_grad():
        a = model(caption, feats)
        changed = caption.clone()
        changed[:, -1] = 11  # change only the last token
        b = model(changed, feats)
    print("position 0 moved by the last token:", (a[:, 0] - b[:, 0]).abs().max().item())
    print("greedy caption:", model.eval().greedy(feats).tolist())
