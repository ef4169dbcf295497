"""MC501: a -1e9-style literal filled into scores that run in float16.

Source: NVIDIA/apex#1052 and #1105 ("value cannot be converted to type at::Half without
overflow: -1e+09"), facebookresearch/fairseq#3575 (-1e8), and the seed
masked_fill_inplace.txt (`attn_scores.masked_fill(mask, -1e9)`).
Surroundings: top of file, after other code, a method under autocast, a closure, a named constant.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

scores = torch.randn(2, 4, 4, dtype=torch.float16)
pad = torch.tensor([[False, False, True, True]] * 2).unsqueeze(1)
scores = scores.masked_fill(pad, -1e9)  # expect: MC501 top

NEG_INF = -1e9
HIDDEN = 64
HEADS = 4
DROPOUT = 0.1


def head_dim(hidden: int, heads: int) -> int:
    return hidden // heads


class Config:
    hidden = HIDDEN
    heads = HEADS
    dropout = DROPOUT


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


half_logits = torch.randn(1, 8, 8).half()
causal = torch.ones(8, 8, dtype=torch.bool).triu(1)
half_logits = half_logits.masked_fill(causal, -1e10)  # expect: MC501 after-code


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.heads = cfg.heads

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
            att = att.masked_fill(mask == 0, NEG_INF)  # expect: MC501 constant
            return F.softmax(att, dim=-1) @ v


def make_scorer(mask: torch.Tensor):
    def score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        logits = (q.half() @ k.half().transpose(-2, -1))
        return logits.masked_fill(~mask, -1e9)  # expect: MC501 closure

    return score
