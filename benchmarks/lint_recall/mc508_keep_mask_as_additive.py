"""MC508: a 0/1 keep mask given where an additive mask is expected: it adds 0 or 1 and masks nothing.

Source: pytorch/pytorch#103963 (float 0/1 attn_mask to SDPA gives plausible but wrong numbers),
huggingface/transformers#32195 and #46458 (0/1 float 4-D masks are added), huggingface/transformers#205.
Surroundings: top of file, after other code, a method (HF mask `.to(dtype)`), a positional SDPA
argument, a closure.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

q = k = v = torch.randn(2, 2, 4, 8)
attention_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask[:, None, None, :].float())  # expect: MC508 top

DIM = 8
HEADS = 2
SCALE = DIM ** -0.5


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b, n, h * d)


class Settings:
    dim = DIM
    heads = HEADS


keep = torch.tensor([[True, True, False, False]])
keep_f = keep.float()  # expect: MC508 positional
out2 = F.scaled_dot_product_attention(q, k, v, keep_f)  # also: MC508
merged = merge_heads(out2)


class EagerAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-1, -2) * SCALE
        ext = attention_mask[:, None, None, :].to(scores.dtype)  # expect: MC508 method
        scores = scores + ext  # also: MC508
        return scores.softmax(-1)


def make_attend(padding_keep: torch.Tensor):
    bias = padding_keep.to(torch.float32)  # expect: MC508 closure

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # also: MC508

    return attend
