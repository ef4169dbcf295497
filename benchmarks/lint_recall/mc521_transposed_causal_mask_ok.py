"""MC521 correct twin: the masked triangle is above the diagonal (triu(..., 1)) for masked-position
masks, below or on it (tril) for keep masks.

Source: pytorch/pytorch#29546's fix (generate_square_subsequent_mask) and the seed
self_attention_mask_guide.txt.
"""

import torch
import torch.nn as nn
from torch import tril

SZ = 5
D = 16
H = 2
look_ahead = torch.triu(torch.full((SZ, SZ), float("-inf")), diagonal=1)
mha = nn.MultiheadAttention(D, H)
x = torch.randn(SZ, 1, D)
future_bool = torch.triu(torch.ones(SZ, SZ, dtype=torch.bool), 1)
y, _ = mha(x, x, x, attn_mask=future_bool)
keep = tril(torch.ones(SZ, SZ, dtype=torch.bool))
qkv = torch.randn(1, 1, SZ, D)
z = torch.nn.functional.scaled_dot_product_attention(qkv, qkv, qkv, attn_mask=keep)


class Decoder(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d, h)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        n = tgt.size(0)
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(n)
        return self.layer(tgt, memory, tgt_mask=tgt_mask)


def nopeek(n: int):
    def mask() -> torch.Tensor:
        m = (torch.triu(torch.ones(n, n)) == 1).transpose(0, 1)
        return m.float().masked_fill(m == 0, float("-inf")).masked_fill(m == 1, 0.0)

    return mask
