"""MC520 correct twin: masks fill the logits with -inf before softmax; multiplying after softmax
(and renormalising) or zeroing outputs is fine.

Source: the fix of georg-wolflein/good-features PR #1 (`torch.masked_fill(a, ~mask, -torch.inf)`).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

a = torch.tensor([0.43, -0.21, 0.99, 0.32, -0.35, 0.04])
mask = torch.tensor([True, True, True, False, False, False])
weights = torch.softmax(torch.masked_fill(a, ~mask, -torch.inf), dim=0)


class ABMIL(nn.Module):
    def __init__(self, dim: int, att_dim: int) -> None:
        super().__init__()
        self.att = nn.Sequential(nn.Linear(dim, att_dim), nn.Tanh(), nn.Linear(att_dim, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = self.att(x).squeeze(-1)
        a = a.masked_fill(~mask, float("-inf"))
        a = torch.softmax(a, dim=1)
        return (a.unsqueeze(-1) * x).sum(1)


def renormalised(pad_keep: torch.Tensor):
    def attend(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        p = (q @ k.transpose(-1, -2)).softmax(-1)
        p = p * pad_keep[:, None, :]
        return p / p.sum(-1, keepdim=True)

    return attend


hidden = torch.randn(2, 6, 8)
hidden = hidden * mask[None, :, None]
