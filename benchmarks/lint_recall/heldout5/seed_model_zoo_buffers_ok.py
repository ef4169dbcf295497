"""Held-out 5 twin (seed): the model-zoo blocks with the buffer built once and added.

Source: the seed article's own advice corrected: the causal buffer is an additive 0/-inf mask built in
__init__ and added to the scores; learned tensors are filled out of place (`.masked_fill`).
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
        future = torch.triu(torch.ones(block_size, block_size), 1).bool()
        self.register_buffer("tri", torch.zeros(block_size, block_size).masked_fill(future, float("-inf")))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        n = scores.size(-1)
        return torch.softmax(scores + self.tri[:n, :n], dim=-1)


@register("relative-bias")
class RelativeBias(nn.Module):
    """Learned per-head relative bias, hidden at padded keys."""

    def __init__(self, heads: int, max_len: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(heads, max_len, max_len))

    def forward(self, scores: torch.Tensor, key_padding: torch.Tensor) -> torch.Tensor:
        n = scores.size(-1)
        bias = self.table[:, :n, :n]
        bias = bias.masked_fill(key_padding[:, None, None, :], float("-inf"))
        return torch.softmax(scores + bias, dim=-1)


def build(name: str, **kwargs) -> nn.Module:
    return MODEL_ZOO[name](**kwargs)


def smoke_check() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x.masked_fill(torch.tensor([False, True]), 0.0)
    y.sum().backward()
