"""MC516: a masking value too weak to mask: real scores reach it, so masked keys still get weight.

Source: TransformerLensOrg/TransformerLens#318 and PR #366 (IGNORE = -1e5: pythia-70m attends past
the causal mask), hyunwoongko/transformer#10 (`score.masked_fill(mask == 0, -e)` with e = 1e-12),
the seed self_attention_mask_guide.txt ("有些框架使用1/-1而不是-inf/0").
Surroundings: top of file, after other code, a method, a closure, a named constant, a default argument.
"""

import torch
import torch.nn as nn

scores = torch.randn(1, 4, 4) * 30
causal = torch.ones(4, 4, dtype=torch.bool).triu(1)
scores = scores.masked_fill(causal, -100)  # expect: MC516 top

IGNORE = -1e5
N_CTX = 8
D_HEAD = 4


def attn_scale(d: int) -> float:
    return d ** -0.5


class Cfg:
    n_ctx = N_CTX
    d_head = D_HEAD


scale = attn_scale(D_HEAD)
big = torch.randn(1, N_CTX, N_CTX) * 1e6
future = torch.ones(N_CTX, N_CTX, dtype=torch.bool).triu(1)
big = torch.where(future, IGNORE, big)  # expect: MC516 constant


class ScaleDotProductAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask=None, e=1e-12):
        score = (q @ k.transpose(2, 3)) * scale
        if mask is not None:
            score = score.masked_fill(mask == 0, -e)  # expect: MC516 method
        return torch.softmax(score, dim=-1) @ v


def masker(pad: torch.Tensor):
    def apply(logits: torch.Tensor) -> torch.Tensor:
        return logits.masked_fill(pad, -1.0).softmax(-1)  # expect: MC516 closure

    return apply
