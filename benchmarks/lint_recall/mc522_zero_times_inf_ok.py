"""MC522 correct twin: -inf written with masked_fill/where/full, or multiplied before triu.

Source: the seed self_attention_mask_guide.txt's generate_causal_mask (correct as written).
"""

import math

import torch
import torch.nn as nn


def generate_causal_mask(sz: int) -> torch.Tensor:
    mask = torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)
    return mask


attn_mask = generate_causal_mask(5)
pad = torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0]])
pad_bias = pad.masked_fill(pad == 1, float("-inf"))
big = torch.ones(3) * -1e9


class Decoder(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, h)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        bias = torch.where(keep, 0.0, -math.inf)
        out, _ = self.attn(x, x, x, attn_mask=bias)
        return out


def causal_bias(n: int):
    def get() -> torch.Tensor:
        return torch.full((n, n), -torch.inf).triu(1)

    return get
