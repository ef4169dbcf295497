"""MC503 correct twin: diagonal=1 for masks of masked positions; diagonal=0 only on keep masks.

Source: the seed self_attention_mask_guide.txt (`torch.triu(torch.ones(sz, sz) * float('-inf'),
diagonal=1)`) and pytorch/pytorch#29546's fix (generate_square_subsequent_mask).
"""

import torch
import torch.nn as nn
from torch import triu

SEQ = 6
look_ahead = torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1)
seed_mask = torch.triu(torch.ones(SEQ, SEQ) * float("-inf"), diagonal=1)

future = torch.ones(SEQ, SEQ, dtype=torch.bool)
future = torch.triu(future, 1)
self_attn = nn.MultiheadAttention(32, 2, batch_first=True)
hidden = torch.randn(2, SEQ, 32)
out, _ = self_attn(hidden, hidden, hidden, attn_mask=future)
keep_upper = torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool))


class Decoder(nn.Module):
    def __init__(self, layer: nn.TransformerDecoderLayer, n: int) -> None:
        super().__init__()
        self.dec = nn.TransformerDecoder(layer, n)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        n = tgt.size(1)
        tgt_mask = triu(torch.ones(n, n, dtype=torch.bool, device=tgt.device), diagonal=1)
        return self.dec(tgt, memory, tgt_mask=tgt_mask)


def cached_mask(n: int):
    neg = torch.full((n, n), float("-inf"))

    def get() -> torch.Tensor:
        return neg.triu(1)

    return get
