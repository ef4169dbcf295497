"""MC515: an (N, S) padding mask handed to SDPA's attn_mask without adding the query axis: it
broadcasts as (L, S), so batch row i's mask is applied to query i of every batch element.

Source: conventions.md 2.6 ((N, S) mask passed to SDPA works "by accident" when N == L),
lucidrains/x-transformers#172 and #240 (what shape a key mask needs).
Surroundings: top of file, after other code, a method (HF attention_mask), a closure, an alias.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as attention

q = k = v = torch.randn(4, 2, 4, 8)
keep = torch.tensor([[True, True, True, False]] * 4)
out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # expect: MC515 top

BATCH = 4
SEQ = 4
DIM = 8


def lengths_to_keep(lengths: torch.Tensor, n: int) -> torch.Tensor:
    return torch.arange(n)[None, :] < lengths[:, None]


class Shape:
    batch = BATCH
    seq = SEQ
    dim = DIM


lengths = torch.tensor([4, 3, 2, 4])
key_keep = lengths_to_keep(lengths, SEQ)
out2 = attention(q, k, v, attn_mask=key_keep)  # expect: MC515 alias


class Encoder(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask.bool())  # expect: MC515 method


def make_attend(ids: torch.Tensor, pad_id: int):
    not_pad = ids != pad_id

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, not_pad)  # expect: MC515 closure

    return attend
