"""MC503: a causal mask made with triu(diagonal=0) also hides each query's own position.

Source: pytorch/pytorch#29546 (look-ahead mask built by hand, wrong triangle/diagonal) and the seed
self_attention_mask_guide.txt (`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)`,
whose diagonal=1 is the part people drop).
Surroundings: top of file, after other code, a method, a closure, `from torch import triu`,
a self-assignment.
"""

import torch
import torch.nn as nn
from torch import triu

SEQ = 6
look_ahead = torch.triu(torch.full((SEQ, SEQ), float("-inf")))  # expect: MC503 top

VOCAB = 100
DIM = 32
LAYERS = 2
embed = nn.Embedding(VOCAB, DIM)
norm = nn.LayerNorm(DIM)


def positions(n: int) -> torch.Tensor:
    return torch.arange(n)


class Cfg:
    dim = DIM
    layers = LAYERS


tokens = torch.randint(0, VOCAB, (2, SEQ))
hidden = norm(embed(tokens))
future = torch.ones(SEQ, SEQ, dtype=torch.bool)
future = torch.triu(future)  # expect: MC503 after-code
self_attn = nn.MultiheadAttention(DIM, 2, batch_first=True)
out, _ = self_attn(hidden, hidden, hidden, attn_mask=future)  # also: MC503


class Decoder(nn.Module):
    def __init__(self, layer: nn.TransformerDecoderLayer, n: int) -> None:
        super().__init__()
        self.dec = nn.TransformerDecoder(layer, n)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        n = tgt.size(1)
        tgt_mask = triu(torch.ones(n, n, dtype=torch.bool, device=tgt.device))  # expect: MC503 alias
        return self.dec(tgt, memory, tgt_mask=tgt_mask)


def cached_mask(n: int):
    neg = torch.full((n, n), float("-inf"))

    def get() -> torch.Tensor:
        return neg.triu(0)  # expect: MC503 closure

    return get
