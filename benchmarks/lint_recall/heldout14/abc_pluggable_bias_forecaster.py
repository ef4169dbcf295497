"""Held-out 14: a time-series forecasting library with pluggable attention biases. Each bias is
a subclass of an abstract base class (`abc.ABC`, `@abstractmethod build`) and the base class
applies it to the attention scores; the library ships a causal bias and a local-window bias,
both additive (0 = keep, -inf = drop).

Source: the seed guide ("PyTorch中mask是'加法'而非'乘法'", Q3: PyTorch masks are added, not
multiplied), LLaVA-VL/LLaVA-NeXT#349 and huggingface/transformers#1935 (an additive mask
multiplied into the scores), `maskcheck explain MC523`. Here the base class's `apply` multiplies
the scores by the additive plane that the subclasses build.
Surroundings: an abstract base class whose abstract method the subclasses implement below it.
"""

import abc

import torch
from torch import nn


class AttentionBias(abc.ABC, nn.Module):
    """Subclasses build an (L, L) plane for the scores of one sequence length."""

    @abc.abstractmethod
    def build(self, length: int, device: torch.device) -> torch.Tensor:
        ...

    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        plane = self.build(scores.shape[-1], scores.device)
        return scores * plane  # expect: MC523 abc


class CausalBias(AttentionBias):
    def build(self, length: int, device: torch.device) -> torch.Tensor:
        return torch.triu(torch.full((length, length), float("-inf"), device=device), diagonal=1)  # also: MC523


class LocalWindowBias(AttentionBias):
    def __init__(self, window: int):
        super().__init__()
        self.window = window

    def build(self, length: int, device: torch.device) -> torch.Tensor:
        pos = torch.arange(length, device=device)
        lag = pos[:, None] - pos[None, :]
        outside = (lag < 0) | (lag >= self.window)
        return torch.zeros(length, length, device=device).masked_fill(outside, float("-inf"))


class ForecastAttention(nn.Module):
    def __init__(self, dim: int, heads: int, bias: AttentionBias):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = self.bias.apply(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class Forecaster(nn.Module):
    """Reads a window of past values of several series and predicts the next value of each."""

    def __init__(self, n_series: int = 7, dim: int = 32, heads: int = 4, window: int = 0):
        super().__init__()
        bias = LocalWindowBias(window) if window else CausalBias()
        self.inp = nn.Linear(n_series, dim)
        self.attn = ForecastAttention(dim, heads, bias)
        self.out = nn.Linear(dim, n_series)

    def forward(self, past: torch.Tensor) -> torch.Tensor:
        h = self.inp(past)
        h = h + self.attn(h)
        return self.out(h)  # one-step-ahead prediction at every position
