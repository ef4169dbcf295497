"""Held-out 6 twin: the set encoder passing its padding mask as bool, True = ignore.

Source: the documented key_padding_mask semantics quoted on pytorch/pytorch#136816 (a bool mask is
the one that ignores keys; a float one is added).
"""

from typing import Tuple

import torch
import torch.nn as nn


def lengths_to_padding(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """True at the padded slots."""
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


class PoolingByAttention(nn.Module):
    def __init__(self, dim: int, heads: int, num_seeds: int = 1) -> None:
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(1, num_seeds, dim))
        self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        seeds = self.seeds.expand(x.shape[0], -1, -1)
        out, _ = self.mha(seeds, x, x, key_padding_mask=pad)
        return out


class PointSetEncoder(nn.Module):
    def __init__(self, in_dim: int = 3, dim: int = 128, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth)
        self.pool = PoolingByAttention(dim, heads)

    def forward(self, points: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        pad = lengths_to_padding(lengths, points.shape[1])
        h = self.encoder(self.embed(points), src_key_padding_mask=pad)
        return self.pool(h, pad), h
