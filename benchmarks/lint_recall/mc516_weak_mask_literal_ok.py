"""MC516 correct twin: -inf, finfo.min, or a large literal on float32 scores.

Source: the fix of TransformerLensOrg/TransformerLens PR #366 (IGNORE = -inf) and of
hyunwoongko/transformer#10 (`-np.inf`). Non-mask fills (zeroing, label smoothing) stay silent.
"""

import torch
import torch.nn as nn

scores = torch.randn(1, 4, 4) * 30
causal = torch.ones(4, 4, dtype=torch.bool).triu(1)
scores = scores.masked_fill(causal, float("-inf"))

IGNORE = -torch.inf
N_CTX = 8
big = torch.randn(1, N_CTX, N_CTX) * 1e6
future = torch.ones(N_CTX, N_CTX, dtype=torch.bool).triu(1)
big = torch.where(future, IGNORE, big)
labels = torch.tensor([3, 5, 7]).masked_fill(torch.tensor([False, True, False]), -100)
hidden = torch.randn(3, 4).masked_fill(torch.tensor([[True], [False], [False]]), 0.0)


class ScaleDotProductAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None):
        score = (q @ k.transpose(2, 3)) * q.size(-1) ** -0.5
        if mask is not None:
            score = score.masked_fill(mask == 0, torch.finfo(score.dtype).min)
        return torch.softmax(score, dim=-1) @ v


def masker(pad: torch.Tensor):
    def apply(logits: torch.Tensor) -> torch.Tensor:
        return logits.float().masked_fill(pad, -1e9).softmax(-1)

    return apply
