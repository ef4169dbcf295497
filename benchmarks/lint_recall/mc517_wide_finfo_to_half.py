"""MC517: torch.finfo(torch.float32).min (-3.4e38) reaching a float16 tensor: masked_fill raises
"value cannot be converted to type c10::Half without overflow"; an add or a cast gives -inf.

Source: huggingface/lerobot PR #710 ("Use safe negative constant for half-precision masking":
torch.where(mask, w, -2.38e38) with fp16 weights), NVIDIA/apex#1052.
Surroundings: top of file, after other code, a method under autocast, a closure, a named constant.
"""

import torch
import torch.nn as nn

logits = torch.randn(1, 4, 4, dtype=torch.float16)
pad = torch.tensor([False, False, True, True])
logits = logits.masked_fill(pad, torch.finfo(torch.float32).min)  # expect: MC517 top

MASK_VALUE = torch.finfo(torch.float32).min
HIDDEN = 16
N_HEADS = 2


def num_heads(hidden: int) -> int:
    return hidden // 8


class Sizes:
    hidden = HIDDEN
    n_heads = N_HEADS


weights = torch.randn(2, 4, 4).half()
keep = torch.ones(4, 4, dtype=torch.bool).tril()
weights = weights.masked_fill(~keep, MASK_VALUE)  # expect: MC517 constant


class Policy(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            q, k = self.qk(x).chunk(2, -1)
            w = q @ k.transpose(-1, -2)
            w = torch.where(keep, w, torch.finfo(torch.float).min)  # expect: MC517 method
            return w.softmax(-1)


def make_bias(keep: torch.Tensor):
    bias = torch.zeros(keep.shape, dtype=torch.float16)

    def fill() -> torch.Tensor:
        return bias.masked_fill(~keep, torch.finfo(torch.float32).min)  # expect: MC517 closure

    return fill
