"""MC513: two masks filled with finfo.min added together: the overlap overflows to -inf.

Source: huggingface/transformers PR #27114 ([AttentionMaskConverter] fix-mask-inf),
NVIDIA-NeMo/Automodel PR #2658 (bf16 -inf overflow from summed finfo.min planes), conventions.md 2.3.
Surroundings: top of file, after other code, a method, a closure, a named constant.
The expected line is the sum.
"""

import torch
import torch.nn as nn

n = 4
mn = torch.finfo(torch.float32).min
causal = torch.triu(torch.full((n, n), mn), 1)
pad = torch.tensor([mn, mn, 0.0, 0.0])
combined = causal + pad  # expect: MC513 top

DTYPE = torch.bfloat16
MIN = torch.finfo(DTYPE).min
VOCAB = 32


def vocab_mask(allowed: list[int]) -> torch.Tensor:
    m = torch.zeros(VOCAB, dtype=torch.bool)
    m[allowed] = True
    return m


class Limits:
    vocab = VOCAB


allowed = vocab_mask([1, 2, 3])
window = torch.zeros(n, n, dtype=DTYPE).masked_fill(torch.ones(n, n, dtype=torch.bool).tril(-2), MIN)
future = torch.zeros(n, n, dtype=DTYPE).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), MIN)
sliding = window + future  # expect: MC513 constant


class MaskBuilder(nn.Module):
    def forward(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        b, s = attention_mask.shape
        min_value = torch.finfo(dtype).min
        causal_4d = torch.full((s, s), min_value, dtype=dtype).triu(1)[None, None]
        padding_4d = (1.0 - attention_mask[:, None, None, :].to(dtype)) * min_value
        causal_4d += padding_4d  # expect: MC513 method
        return causal_4d


def ragged_mask(lengths: torch.Tensor, s: int):
    fmin = torch.finfo(torch.bfloat16).min
    causal_plane = torch.triu(torch.full((s, s), fmin, dtype=torch.bfloat16), diagonal=1)

    def build() -> torch.Tensor:
        pad_plane = torch.where(torch.arange(s)[None, :] < lengths[:, None], 0.0, fmin).to(torch.bfloat16)
        return causal_plane[None] + pad_plane[:, None, :]  # expect: MC513 closure

    return build
