"""Held-out 5 twin: the Reformer LSH attention port masking with fills instead of products.

Source: the fix on cerebroai/reformers#3 (no product with -inf), written with masked_fill and the
self-token value reformer implementations use.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKEN_SELF_ATTN_VALUE = -5e4


def causal_bias(n: int, device=None) -> torch.Tensor:
    tri = torch.tril(torch.ones(n, n, device=device))
    return torch.zeros(n, n, device=device).masked_fill(tri == 0, float("-inf"))


class LSHSelfAttention(nn.Module):
    def __init__(self, dim: int, causal: bool = False) -> None:
        super().__init__()
        self.to_qk = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.causal = causal
        self.scale = dim ** -0.5

    def forward(self, x: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
        qk, v = self.to_qk(x), self.to_v(x)
        n = x.size(1)
        dots = torch.einsum("bie,bje->bij", qk, F.normalize(qk, dim=-1)) * self.scale
        dots = dots.masked_fill(~input_mask[:, None, :].bool(), float("-inf"))
        dots = dots.masked_fill(torch.eye(n, dtype=torch.bool, device=x.device), TOKEN_SELF_ATTN_VALUE)
        if self.causal:
            dots = dots + causal_bias(n, x.device)
        return torch.einsum("bij,bje->bie", dots.softmax(dim=-1), v)
