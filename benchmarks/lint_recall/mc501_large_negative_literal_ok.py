"""MC501 correct twin: the fills use finfo(dtype).min, -inf, a dtype branch, or run in float32.

Source: the fixes of NVIDIA/apex#1052, facebookresearch/fairseq#3575 (fairseq's
`-1e8 if x.dtype == torch.float32 else -1e4`) and huggingface/lerobot PR #710.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

scores = torch.randn(2, 4, 4, dtype=torch.float16)
pad = torch.tensor([[False, False, True, True]] * 2).unsqueeze(1)
scores = scores.masked_fill(pad, torch.finfo(scores.dtype).min)

HIDDEN = 64
HEADS = 4


class Config:
    hidden = HIDDEN
    heads = HEADS


fp32_logits = torch.randn(1, 8, 8).float()
causal = torch.ones(8, 8, dtype=torch.bool).triu(1)
fp32_logits = fp32_logits.masked_fill(causal, -1e10)

beam_scores = torch.zeros(4, 5, dtype=torch.float32)
beam_scores[:, 1:] = -1e9


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        att = att.masked_fill(mask == 0, -1e8 if x.dtype == torch.float32 else -1e4)
        return F.softmax(att, dim=-1) @ v


def upcast_scorer(mask: torch.Tensor):
    def score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        logits = (q @ k.transpose(-2, -1)).float()
        return logits.masked_fill(~mask, -1e9)

    return score


def where_mask(keep: torch.Tensor) -> torch.Tensor:
    return torch.where(keep, 0.0, -2.3819763e38)
