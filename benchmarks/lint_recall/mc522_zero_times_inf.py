"""MC522: a 0/1 mask multiplied by -inf: 0 * -inf is NaN, so every kept position becomes NaN.

Source: the seed self_attention_mask_guide.txt (its generate_causal_mask multiplies *before*
triu: `torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)`; swapping the order gives
NaN below the diagonal), checked on torch 2.13.
Surroundings: top of file, after other code, a method, a closure, a named constant.
"""

import math

import torch
import torch.nn as nn

sz = 5
attn_mask = torch.triu(torch.ones(sz, sz), diagonal=1) * float("-inf")  # expect: MC522 top

NEG_INF = float("-inf")
EMBED = 16
HEADS = 4


def param_count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


class Arch:
    embed = EMBED
    heads = HEADS


mha = nn.MultiheadAttention(EMBED, HEADS)
n_params = param_count(mha)
pad = torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0]])
pad_bias = pad * NEG_INF  # expect: MC522 constant


class Decoder(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, h)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        bias = (1.0 - keep.float()) * -math.inf  # expect: MC522 method
        out, _ = self.attn(x, x, x, attn_mask=bias)
        return out


def causal_bias(n: int):
    upper = torch.ones(n, n).triu(1)

    def get() -> torch.Tensor:
        return upper.mul(-torch.inf)  # expect: MC522 closure

    return get
