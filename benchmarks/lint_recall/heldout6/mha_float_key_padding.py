"""Held-out 6: a set encoder over variable-length point clouds that hands nn.MultiheadAttention and
nn.TransformerEncoder a float 0/1 padding indicator as the key padding mask.

Source: pytorch/pytorch#136816 (MultiheadAttention's `key_padding_mask`: a float mask is *added* to
the scores, so `[[0., 1.]]` does not ignore the second key -- the reporter expected it to mask, and
got weights that do not match a masked softmax). Checked on torch 2.13 CPU: with
`key_padding_mask=torch.tensor([[0., 0., 1.]])` the padded key gets the largest weight.
Surroundings: the padding mask built by a helper from lengths as a bool, converted to the input's
dtype in the encoder's forward and passed by keyword to a TransformerEncoder, and a pooling head
that hands the same float mask to nn.MultiheadAttention.
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
        pad = lengths_to_padding(lengths, points.shape[1]).to(points.dtype)
        h = self.encoder(self.embed(points), src_key_padding_mask=pad)  # expect: MC508 keyword
        return self.pool(h, pad), h  # expect: MC508 forwarded
