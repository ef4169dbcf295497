"""Held-out 5 (seed): a model-zoo module of small attention blocks registered by name.

Source: seed article on `.masked_fill_()` (http://www.malaoshi.top/show_1GW2dK2sR135.html): its
"与模型缓冲区的配合" example (`self.register_buffer("mask", torch.ones(3, 3))`, then in forward
`self.mask.masked_fill_(torch.triu(torch.ones(3,3), 1).bool(), -1e9)` and `return x * self.mask`) and its
gradient example (`x = torch.tensor([1.0, 2.0], requires_grad=True); x.masked_fill_(...)`).
Surroundings: a registry decorator, a buffer rewritten in forward, the buffer multiplied in, a view
of a learned parameter filled in place, a smoke-check helper.
"""

import torch
import torch.nn as nn

MODEL_ZOO: dict[str, type[nn.Module]] = {}


def register(name: str):
    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        MODEL_ZOO[name] = cls
        return cls
    return wrap


@register("causal-gate")
class CausalGate(nn.Module):
    """Hides the future of a (batch, n, n) score tensor."""

    def __init__(self, block_size: int) -> None:
        super().__init__()
        self.register_buffer("tri", torch.ones(block_size, block_size))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        n = scores.size(-1)
        future = torch.triu(torch.ones(n, n, device=scores.device), 1).bool()
        self.tri.masked_fill_(future, -1e9)  # expect: MC524 buffer
        return torch.softmax(scores * self.tri, dim=-1)  # expect: MC523 buffer


@register("relative-bias")
class RelativeBias(nn.Module):
    """Learned per-head relative bias, hidden at padded keys."""

    def __init__(self, heads: int, max_len: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(heads, max_len, max_len))

    def forward(self, scores: torch.Tensor, key_padding: torch.Tensor) -> torch.Tensor:
        n = scores.size(-1)
        bias = self.table[:, :n, :n]
        bias.masked_fill_(key_padding[:, None, None, :], float("-inf"))  # expect: MC505 parameter-view
        return torch.softmax(scores + bias, dim=-1)


def build(name: str, **kwargs) -> nn.Module:
    return MODEL_ZOO[name](**kwargs)


def smoke_check() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    x.masked_fill_(torch.tensor([False, True]), 0.0)  # expect: MC505 function
    x.sum().backward()
