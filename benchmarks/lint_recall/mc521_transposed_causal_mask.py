"""MC521: a look-ahead mask built the wrong way round: the masked triangle is below the diagonal,
so early tokens see the future and later tokens see less.

Source: pytorch/pytorch#29546 ("Flipped look-ahead attention mask for transformer": -inf below the
diagonal), the seed self_attention_mask_guide.txt (causal mask = -inf above the diagonal).
Surroundings: top of file, after other code, a method, a closure, `from torch import tril`.
"""

import torch
import torch.nn as nn
from torch import tril

SZ = 5
look_ahead = torch.tril(torch.full((SZ, SZ), float("-inf")), diagonal=-1)  # expect: MC521 top

D = 16
H = 2
FF = 32


def ff_block(d: int, ff: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))


class Sz:
    d = D
    h = H


block = ff_block(D, FF)
mha = nn.MultiheadAttention(D, H)
x = torch.randn(SZ, 1, D)
future_bool = tril(torch.ones(SZ, SZ, dtype=torch.bool), -1)  # expect: MC521 alias
y, _ = mha(x, x, x, attn_mask=future_bool)  # also: MC521


class Decoder(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d, h)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        n = tgt.size(0)
        tgt_mask = torch.ones(n, n).tril(-1).bool()  # expect: MC521 method
        return self.layer(tgt, memory, tgt_mask=tgt_mask)  # also: MC521


def nopeek(n: int):
    def mask() -> torch.Tensor:
        m = (torch.triu(torch.ones(n, n)) == 1).transpose(0, 1)
        return m.float().masked_fill(m == 1, float("-inf")).masked_fill(m == 0, 0.0)  # expect: MC521 closure

    return mask
