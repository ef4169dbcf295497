"""MC513 correct twin: masks combined as bools then filled once, or summed then clamped.

Source: transformers 5.x `eager_mask` (torch.where on the combined bool mask) and the fix of
huggingface/transformers PR #27114 / NVIDIA-NeMo/Automodel PR #2658 (clamp to finfo.min).
"""

import torch
import torch.nn as nn

n = 4
mn = torch.finfo(torch.float32).min
future = torch.ones(n, n, dtype=torch.bool).triu(1)
pad = torch.tensor([True, True, False, False])
combined = torch.zeros(n, n).masked_fill(future | pad, mn)


class MaskBuilder(nn.Module):
    def forward(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        b, s = attention_mask.shape
        min_value = torch.finfo(dtype).min
        causal_4d = torch.full((s, s), min_value, dtype=dtype).triu(1)[None, None]
        padding_4d = (1.0 - attention_mask[:, None, None, :].to(dtype)) * min_value
        return (causal_4d + padding_4d).clamp(min=min_value)


def ragged_mask(lengths: torch.Tensor, s: int):
    fmin = torch.finfo(torch.bfloat16).min
    future_b = torch.ones(s, s, dtype=torch.bool).triu(1)

    def build() -> torch.Tensor:
        is_pad = torch.arange(s)[None, :] >= lengths[:, None]
        drop = future_b[None] | is_pad[:, None, :]
        return torch.where(drop, fmin, 0.0).to(torch.bfloat16)

    return build


scores = torch.randn(n, n)
scores = scores + torch.zeros(n, n).masked_fill(future, mn)
