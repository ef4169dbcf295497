"""Held-out 4: large negative literals as the masked value in attention code that later runs in
float16 (BERT-pytorch style single-head attention, a head-wise attention whose fill value is a
constructor default, a Linformer-style causal softmax).

Source: pytorch/benchmark#794 (BERT_pytorch `single.py`: `scores.masked_fill(mask == 0, -1e9)`
overflows once the model is run in fp16; fixed with the dtype's own minimum), NVIDIA/apex#1105
(`attn_scores_head.masked_fill(head_mask == 0, -1e10)` raises `value cannot be converted to type
at::Half without overflow` under mixed precision), tatp22/linformer-pytorch#19 (the causal mask's
-1e10 replaced for fp16 training).
Surroundings: the function form `torch.masked_fill(...)`, a fill value given as a constructor
default and read back from `self`, a literal wrapped in `float(...)`.
"""

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """Compute 'Scaled Dot Product Attention'."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: Optional[torch.Tensor] = None, dropout: Optional[nn.Module] = None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = torch.masked_fill(scores, mask == 0, -1e9)  # expect: MC501 function-form
        p_attn = F.softmax(scores, dim=-1)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn


class HeadwiseAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, mask_value: float = -1e10) -> None:
        super().__init__()
        self.heads = heads
        self.d_k = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.mask_value = mask_value

    def forward(self, x: torch.Tensor, head_mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.d_k).permute(2, 0, 3, 1, 4)
        attn_scores_head = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        attn_scores_head = attn_scores_head.masked_fill(head_mask == 0, self.mask_value)  # expect: MC501 attribute-default
        probs = attn_scores_head.softmax(dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, n, -1))


def linformer_causal_softmax(dots: torch.Tensor) -> torch.Tensor:
    n = dots.shape[-1]
    causal_mask = torch.ones(n, n, device=dots.device, dtype=torch.bool).triu(1)
    dots = dots.masked_fill(causal_mask[None], float(-1e10))  # expect: MC501 float-call
    return dots.softmax(dim=-1)


def train_step(model: nn.Module, batch: dict, optimizer: torch.optim.Optimizer) -> float:
    model.half()
    hidden = batch["hidden"].half()
    head_mask = batch["head_mask"]
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(hidden, head_mask)
        loss = out.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    return float(loss)
