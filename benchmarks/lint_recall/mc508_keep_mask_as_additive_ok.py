"""MC508 correct twin: keep masks are given as bool, or turned into 0 / large-negative first.

Source: the fixes of pytorch/pytorch#103963 and huggingface/transformers#32195
(`(1.0 - mask) * torch.finfo(dtype).min`).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

q = k = v = torch.randn(2, 2, 4, 8)
attention_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask[:, None, None, :].bool())

keep = torch.tensor([[True, True, False, False]])
out2 = F.scaled_dot_product_attention(q, k, v, keep)

DIM = 8
SCALE = DIM ** -0.5


class EagerAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-1, -2) * SCALE
        ext = attention_mask[:, None, None, :].to(scores.dtype)
        ext = (1.0 - ext) * torch.finfo(scores.dtype).min
        scores = scores + ext
        return scores.softmax(-1)


def make_attend(padding_keep: torch.Tensor):
    bias = torch.zeros(padding_keep.shape).masked_fill(~padding_keep, float("-inf"))

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    return attend
