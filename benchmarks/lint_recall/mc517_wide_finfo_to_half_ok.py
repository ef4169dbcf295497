"""MC517 correct twin: finfo of the tensor's own dtype, or the float32 value on float32 tensors.

Source: the fix of huggingface/lerobot PR #710 (torch.finfo(w.dtype).min).
"""

import torch
import torch.nn as nn

logits = torch.randn(1, 4, 4, dtype=torch.float16)
pad = torch.tensor([False, False, True, True])
logits = logits.masked_fill(pad, torch.finfo(logits.dtype).min)

MASK_VALUE = torch.finfo(torch.float32).min
weights = torch.randn(2, 4, 4).float()
keep = torch.ones(4, 4, dtype=torch.bool).tril()
weights = weights.masked_fill(~keep, MASK_VALUE)


class Policy(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            q, k = self.qk(x).chunk(2, -1)
            w = q @ k.transpose(-1, -2)
            w = torch.where(keep, w, torch.finfo(w.dtype).min)
            return w.softmax(-1)


def make_bias(keep: torch.Tensor):
    bias = torch.zeros(keep.shape, dtype=torch.float16)

    def fill() -> torch.Tensor:
        return bias.masked_fill(~keep, torch.finfo(torch.float16).min)

    return fill
