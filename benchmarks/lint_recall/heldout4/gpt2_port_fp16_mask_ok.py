"""Held-out 4 twin: a PyTorch port of GPT-2's attention that
keeps the original `w * b - 1e10 * (1 - b)` masking, run in float16.

Source: openai/gpt-2#122 ("Update mask_attn_weights to work with mixed precision training":
multiplying by 1e10 overflows in fp16; the PR lowers it to 1e4), ported here from TensorFlow to
torch the way GPT-2 ports write it.
Surroundings: the mask made by a helper of the file (a 0/1 float lower triangle), the constant
inline in a method and held in a module constant in a cached-decoding method.
"""

import math

import torch
import torch.nn as nn

MASK_VALUE = 1e4


def attention_mask(nd: int, ns: int, dtype: torch.dtype) -> torch.Tensor:
    i = torch.arange(nd)[:, None]
    j = torch.arange(ns)
    return (i >= j - ns + nd).to(dtype)


class GPT2Attention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def mask_attn_weights(self, w: torch.Tensor) -> torch.Tensor:
        nd, ns = w.shape[-2], w.shape[-1]
        b = attention_mask(nd, ns, dtype=w.dtype)
        return w * b - 1e4 * (1 - b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, n, d = x.shape
        q, k, v = self.c_attn(x).view(bsz, n, 3, self.n_head, -1).permute(2, 0, 3, 1, 4)
        w = q @ k.transpose(-1, -2) / math.sqrt(v.size(-1))
        w = self.mask_attn_weights(w).softmax(dim=-1)
        return self.c_proj((w @ v).transpose(1, 2).reshape(bsz, n, d))

    def step(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor) -> torch.Tensor:
        bsz, n, d = x.shape
        q, k, v = self.c_attn(x).view(bsz, n, 3, self.n_head, -1).permute(2, 0, 3, 1, 4)
        k, v = torch.cat([past_k, k], dim=-2), torch.cat([past_v, v], dim=-2)
        w = q @ k.transpose(-1, -2) / math.sqrt(v.size(-1))
        b = attention_mask(w.shape[-2], w.shape[-1], dtype=w.dtype)
        w = w * b - MASK_VALUE * (1.0 - b)
        return (w.softmax(dim=-1) @ v).transpose(1, 2).reshape(bsz, n, d)


def generate(model: GPT2Attention, x: torch.Tensor) -> torch.Tensor:
    model = model.half()
    return model(x.half())
