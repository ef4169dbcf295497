"""MC523: an additive mask (0 / -inf or 0 / -1e9) multiplied into scores or weights: kept
positions become 0 and masked ones become huge negative (or NaN), instead of being added.

Source: the seed masked_fill_inplace.txt (`self.mask.masked_fill_(..., -1e9)` then
`return x * self.mask`), the seed self_attention_mask_guide.txt ("PyTorch中mask是加法而非乘法").
Surroundings: top of file, after other code, a method (the seed's model), a closure, a
generate_square_subsequent_mask result.
"""

import torch
import torch.nn as nn

n = 4
causal_add = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
scores = torch.randn(1, n, n)
weights = (scores * causal_add).softmax(-1)  # expect: MC523 top

WIDTH = 8
DEPTH = 2


def act(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x)


class Widths:
    width = WIDTH
    depth = DEPTH


square = nn.Transformer.generate_square_subsequent_mask(n)
att = torch.randn(2, n, n).softmax(-1)
att = att * square  # expect: MC523 after-code


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.zeros(3, 3).masked_fill(torch.ones(3, 3).triu(1).bool(), -1e9))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask  # expect: MC523 method


def pad_bias_apply(lengths: torch.Tensor, s: int):
    bias = torch.where(torch.arange(s)[None, :] < lengths[:, None], 0.0, float("-inf"))

    def apply(w: torch.Tensor) -> torch.Tensor:
        return torch.mul(w, bias[:, None, :])  # expect: MC523 closure

    return apply
