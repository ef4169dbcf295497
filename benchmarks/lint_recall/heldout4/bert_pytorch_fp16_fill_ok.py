"""Held-out 4 twin: the masked value is the minimum of the dtype of the scores being filled.

Source: pytorch/benchmark#794, NVIDIA/apex#1105, tatp22/linformer-pytorch#19 (the fixes: the
dtype's own minimum, or -inf where a row always keeps one position).
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
            scores = torch.masked_fill(scores, mask == 0, torch.finfo(scores.dtype).min)
        p_attn = F.softmax(scores, dim=-1)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn


class HeadwiseAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, mask_value: Optional[float] = None) -> None:
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
        fill = self.mask_value if self.mask_value is not None else torch.finfo(attn_scores_head.dtype).min
        attn_scores_head = attn_scores_head.masked_fill(head_mask == 0, fill)
        probs = attn_scores_head.softmax(dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, n, -1))


def linformer_causal_softmax(dots: torch.Tensor) -> torch.Tensor:
    n = dots.shape[-1]
    causal_mask = torch.ones(n, n, device=dots.device, dtype=torch.bool).triu(1)
    dots = dots.masked_fill(causal_mask[None], float("-inf"))
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
