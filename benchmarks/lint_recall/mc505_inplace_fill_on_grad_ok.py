"""MC505 correct twin: out-of-place masked_fill on trainable tensors; in place only on buffers,
under no_grad, or on tensors that do not require grad.

Source: the seed masked_fill_inplace.txt ("对需要梯度的张量，优先使用 .masked_fill()").
"""

import torch
import torch.nn as nn

x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x.masked_fill(torch.tensor([False, True]), 0.0)

SEQ = 5
bias = nn.Parameter(torch.zeros(SEQ, SEQ))
future = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
with torch.no_grad():
    bias.masked_fill_(future, float("-inf"))

scratch = torch.zeros(SEQ, SEQ)
scratch.masked_fill_(future, float("-inf"))


class RelativeBias(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(n, n))

    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return scores + self.table.masked_fill(pad, 0.0)


def make_prompt(n: int, dim: int):
    prompt = torch.randn(n, dim, requires_grad=True)

    def drop(idx: torch.Tensor) -> torch.Tensor:
        return prompt.masked_fill(idx[:, None], 0.0)

    return drop
