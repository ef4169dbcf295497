"""MC524: an in-place write on a registered buffer inside forward: the buffer is rewritten on every
call (and under DataParallel/compile the mutation leaks across calls and replicas).

Source: the seed masked_fill_inplace.txt (`self.mask.masked_fill_(torch.triu(...).bool(), -1e9)`
inside `forward`, presented as "适合用 .masked_fill_() 原地修改").
Surroundings: the seed's model (method), after other code, a nested helper, index assignment, fill_.
"""

import torch
import torch.nn as nn

DIM = 3
STEPS = 10
LR = 0.1


def schedule(step: int) -> float:
    return LR * (1 - step / STEPS)


class Config:
    dim = DIM
    steps = STEPS


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mask.masked_fill_(torch.triu(torch.ones(3, 3), 1).bool(), -1e9)  # expect: MC524 method
        return x + self.mask


class SlidingWindow(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("bias", torch.zeros(n, n), persistent=False)

    def forward(self, scores: torch.Tensor, window: int) -> torch.Tensor:
        n = scores.size(-1)
        for i in range(n):
            self.bias[i, : max(0, i - window)] = float("-inf")  # expect: MC524 index
        return scores + self.bias


class PadMasked(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("key_bias", torch.zeros(1, n))

    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        def apply() -> torch.Tensor:
            self.key_bias.fill_(0.0).masked_fill_(pad, float("-inf"))  # expect: MC524 closure
            return scores + self.key_bias

        return apply()
