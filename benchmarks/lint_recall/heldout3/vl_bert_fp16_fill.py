"""Held-out 3: large negative fill values in a vision-language encoder trained with fp16 / amp.

Source: facebookresearch/mmf PR #962 ("-1e9 induces RuntimeError: value cannot be converted to
type at::Half without overflow when fp16=true, replace it with -10000.0"), JunnYu/GAU-alpha-pytorch#1
(the layer's INF constant overflows in half-precision training; fixed with INF = 1e4) and
NVIDIA/apex#93 (masking padding with -1e15 under amp: "-1e15 is just too large for fp16").
Surroundings: an encoder's forward, a gated-attention unit with a module constant, a masked
softmax helper, an additive padding bias.
"""

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

INF = 1e12


class VisualBertSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, -1e9)  # expect: MC501 method
        probs = self.dropout(F.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size(0), context.size(1), -1)


class GatedAttentionUnit(nn.Module):
    def __init__(self, hidden_size: int, expansion: int = 2, key_size: int = 128) -> None:
        super().__init__()
        self.i_dense = nn.Linear(hidden_size, 2 * expansion * hidden_size + key_size)
        self.o_dense = nn.Linear(expansion * hidden_size, hidden_size)
        self.q_scale = nn.Parameter(torch.ones(key_size))
        self.k_scale = nn.Parameter(torch.ones(key_size))
        self.expanded = expansion * hidden_size
        self.key_size = key_size

    def forward(self, x: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        u, v, z = torch.split(F.silu(self.i_dense(x)), [self.expanded, self.expanded, self.key_size], -1)
        q, k = z * self.q_scale, z * self.k_scale
        a = torch.einsum("bmd,bnd->bmn", q, k) / math.sqrt(self.key_size)
        if attention_mask is not None:
            a = a.masked_fill(attention_mask[:, None, :] == 0, -INF)  # expect: MC501 constant
        a = F.softmax(a, dim=-1)
        return self.o_dense(u * torch.einsum("bmn,bnd->bmd", a, v))


def masked_softmax(logits: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(logits.size(-1), device=logits.device)
    pad = positions[None, :] >= lengths[:, None]
    logits = logits.masked_fill(pad, -1e15)  # expect: MC501 function
    return torch.softmax(logits, dim=-1)


def conv_attention_pool(features: torch.Tensor, keep: torch.Tensor, scorer: nn.Conv1d) -> torch.Tensor:
    scores = scorer(features.transpose(1, 2)).squeeze(1)
    scores = scores + (1.0 - keep.to(scores.dtype)) * -1e15  # expect: MC501 helper
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bn,bnd->bd", weights, features)


def train_step(model: nn.Module, batch: dict, optimizer: torch.optim.Optimizer,
               scaler: torch.cuda.amp.GradScaler) -> float:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(batch["features"], batch["attention_mask"])
        loss = F.cross_entropy(out.mean(1), batch["labels"])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return float(loss)
