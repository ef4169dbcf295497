"""Held-out 2: BERT-pytorch style attention run under fp16 / AMP with a -1e9 / -1e10 fill.

Source: pytorch/benchmark PR #794 (BERT_pytorch `single.py`: `scores.masked_fill(mask == 0, -1e9)`
fails for fp16 inference), bentrevett/pytorch-seq2seq#191 (`energy.masked_fill(mask == 0, -1e10)`
cannot be converted to half), tatp22/linformer-pytorch PR #19 (its causal mask is made
float32 first, so -1e10 fits there: not a bug, and not marked).
"""

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """Compute 'Scaled Dot Product Attention'."""

    def forward(self, query, key, value, mask: Optional[torch.Tensor] = None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))

        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)  # expect: MC501 method

        p_attn = F.softmax(scores, dim=-1)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h: int, d_model: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.d_k = d_model // h
        self.h = h
        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.attention = Attention()
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        query, key, value = [
            lin(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linear_layers, (query, key, value))
        ]
        x, _ = self.attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        return self.output_linear(x)


def energy_attention(Q, K, V, mask, scale):
    energy = torch.matmul(Q, K.permute(0, 1, 3, 2)) / scale
    if mask is not None:
        energy = energy.masked_fill(mask == 0, -1e10)  # expect: MC501 function
    attention = torch.softmax(energy, dim=-1)
    return torch.matmul(attention, V), attention


def linformer_causal(n: int, device: torch.device) -> torch.Tensor:
    mask = (torch.triu(torch.ones(n, n, device=device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, -1e10).masked_fill(mask == 1, 0.0)  # float32: fits
    return mask


def run_amp(model: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x, x, x, mask)
