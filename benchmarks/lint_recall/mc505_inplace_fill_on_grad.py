"""MC505: masked_fill_ in place on a tensor that requires grad.

Source: the seed masked_fill_inplace.txt ("x = torch.tensor([1.0, 2.0], requires_grad=True);
x.masked_fill_(...)": a leaf Variable that requires grad is being used in an in-place operation).
Surroundings: top of file, after other code (nn.Parameter), a method, a `.requires_grad_()` chain,
a closure.
"""

import torch
import torch.nn as nn

x = torch.tensor([1.0, 2.0], requires_grad=True)
x.masked_fill_(torch.tensor([False, True]), 0.0)  # expect: MC505 top

DIM = 8
SEQ = 5
LR = 1e-3


def init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)


class Hparams:
    dim = DIM
    seq = SEQ
    lr = LR


lin = nn.Linear(DIM, DIM)
lin.apply(init_weights)
bias = nn.Parameter(torch.zeros(SEQ, SEQ))
future = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
bias.masked_fill_(future, float("-inf"))  # expect: MC505 after-code

rel = torch.randn(SEQ, SEQ).requires_grad_()
rel.masked_fill_(future, 0.0)  # expect: MC505 reassigned


class RelativeBias(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(n, n))

    def forward(self, scores: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        self.table.masked_fill_(pad, 0.0)  # expect: MC505 method
        return scores + self.table


def make_prompt(n: int):
    prompt = torch.randn(n, DIM, requires_grad=True)

    def drop(idx: torch.Tensor) -> torch.Tensor:
        return prompt.masked_fill_(idx[:, None], 0.0)  # expect: MC505 closure

    return drop
