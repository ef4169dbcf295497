"""MC509: a bool mask added to scores: True becomes +1, nothing is masked.

Source: conventions.md 2.9 (transformers eager attention does `attn_weights + attention_mask`, so a
4-D bool mask masks nothing) and huggingface/transformers#46458 / #32113.
Surroundings: top of file, after other code, a method, a closure, `torch.add`.
"""

import torch
import torch.nn as nn

scores = torch.randn(1, 4, 4)
causal = torch.ones(4, 4, dtype=torch.bool).tril()
scores = scores + causal  # expect: MC509 top

WIDTH = 4
LAYERS = 2


def make_ids(n: int) -> torch.Tensor:
    return torch.arange(n).unsqueeze(0)


class LayerSizes:
    width = WIDTH
    layers = LAYERS


ids = make_ids(WIDTH)
pad_keep = ids != 0
weights = torch.randn(1, 1, 4, 4)
weights = torch.add(weights, pad_keep[:, None, None, :])  # expect: MC509 after-code


class EagerAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.out = nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int) -> torch.Tensor:
        attn_weights = q @ k.transpose(2, 3)
        causal_mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        attn_weights = attn_weights + causal_mask  # expect: MC509 method
        return attn_weights.softmax(-1) @ v


def window_bias(n: int, w: int):
    idx = torch.arange(n)
    inside = (idx[:, None] - idx[None, :]).abs() <= w

    def apply(s: torch.Tensor) -> torch.Tensor:
        s += inside  # expect: MC509 closure
        return s.softmax(-1)

    return apply
