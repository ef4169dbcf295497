"""Held-out 5: a PyTorch port of a Reformer's LSH attention that masks by multiplying with -inf.

Source: cerebroai/reformers#3 ("Multiply by float('-inf') causes nan output": `dots = dots * mask +
(1 - mask) * float('-inf')` in TFLSHAttention; "Changed to * -1e9 has fixed it"), ported to torch as
projects porting that code do.
Surroundings: the port's forward, a causal-bias helper built from tril, the self-token mask of
shared-QK attention.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_bias(n: int, device=None) -> torch.Tensor:
    tri = torch.tril(torch.ones(n, n, device=device))
    return (1.0 - tri) * float("-inf")  # expect: MC522 function


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
        mask = input_mask[:, None, :].float()
        dots = dots * mask + (1 - mask) * float("-inf")  # expect: MC522 method
        dots = dots + torch.eye(n, device=x.device) * float("-inf")  # expect: MC522 self-mask
        if self.causal:
            dots = dots + causal_bias(n, x.device)
        return torch.einsum("bij,bje->bie", dots.softmax(dim=-1), v)
