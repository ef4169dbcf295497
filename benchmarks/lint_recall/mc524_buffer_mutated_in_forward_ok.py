"""MC524 correct twin: the buffer is filled once in __init__, and forward builds a new tensor.

Source: the fix of the seed masked_fill_inplace.txt's model.
"""

import torch
import torch.nn as nn


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(3, 3))
        self.mask.masked_fill_(torch.triu(torch.ones(3, 3), 1).bool(), -1e9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mask


class SlidingWindow(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("bias", torch.zeros(n, n), persistent=False)

    def forward(self, scores: torch.Tensor, window: int) -> torch.Tensor:
        n = scores.size(-1)
        bias = self.bias[:n, :n].clone()
        for i in range(n):
            bias[i, : max(0, i - window)] = float("-inf")
        return scores + bias


class PadMasked(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("key_bias", torch.zeros(1, n))
        self.steps = 0

    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return scores + self.key_bias.masked_fill(pad, float("-inf"))
