"""MC523 correct twin: additive masks are added; only 0/1 keep masks multiply (after softmax).

Source: the seed self_attention_mask_guide.txt ("PyTorch中mask是加法") and the fix of the seed
masked_fill_inplace.txt's model.
"""

import torch
import torch.nn as nn

n = 4
causal_add = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
scores = torch.randn(1, n, n)
weights = (scores + causal_add).softmax(-1)
square = nn.Transformer.generate_square_subsequent_mask(n)
att = (torch.randn(2, n, n) + square).softmax(-1)
keep = torch.ones(n, n).tril()
att2 = att * keep


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.zeros(3, 3).masked_fill(torch.ones(3, 3).triu(1).bool(), -1e9))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mask


def pad_bias_apply(lengths: torch.Tensor, s: int):
    bias = torch.where(torch.arange(s)[None, :] < lengths[:, None], 0.0, float("-inf"))

    def apply(w: torch.Tensor) -> torch.Tensor:
        return torch.add(w, bias[:, None, :])

    return apply
