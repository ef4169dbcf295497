"""Held-out 7: an ESPnet-style speech recognition decoder (`make_pad_mask` from lengths,
`subsequent_mask`, `MultiHeadedAttention` with a cached minimum value, a beam-search step).

Source: rasbt/LLMs-from-scratch#1061 and conventions.md section 1 (a True = padding mask handed to
SDPA, here from a `make_pad_mask(lens)` helper), pytorch/pytorch#29546 (a look-ahead mask in the
wrong triangle, here `triu` ANDed with a True = keep padding mask), huggingface/transformers PR
#27114 and NVIDIA-NeMo/Automodel PR #2658 (two finfo.min planes summed, here one written as
`pad.to(dtype) * neg` and one with torch.full).
Surroundings: length-based masks, helper functions, a variable holding finfo.min, method chains.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


def make_pad_mask(lengths: torch.Tensor, max_len: Optional[int] = None) -> torch.Tensor:
    """True on padded frames."""
    max_len = max_len or int(lengths.max())
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    return seq_range.unsqueeze(0) >= lengths.unsqueeze(-1)


def subsequent_mask(size: int, device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """True where a position may be attended."""
    return torch.ones(size, size, device=device, dtype=torch.bool).triu()  # expect: MC521 top


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int, dropout_rate: float = 0.1):
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.dropout_rate = dropout_rate

    def forward(self, query, key, value, lens: torch.Tensor) -> torch.Tensor:
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        pad = make_pad_mask(lens, k.size(2))
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=pad.unsqueeze(1).unsqueeze(1),  # expect: MC511 positional
                                           dropout_p=self.dropout_rate if self.training else 0.0)
        return self.linear_out(x.transpose(1, 2).reshape(n_batch, -1, self.h * self.d_k))


class TransformerDecoder(nn.Module):
    def __init__(self, vocab: int, d_model: int = 256, heads: int = 4, layers: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.self_attn = nn.ModuleList(MultiHeadedAttention(heads, d_model) for _ in range(layers))
        self.output_layer = nn.Linear(d_model, vocab)

    def tgt_keep_mask(self, ys_in_pad: torch.Tensor, ys_in_lens: torch.Tensor) -> torch.Tensor:
        tgt_mask = ~make_pad_mask(ys_in_lens, ys_in_pad.size(1)).unsqueeze(1)
        m = subsequent_mask(tgt_mask.size(-1), device=tgt_mask.device).unsqueeze(0)
        return tgt_mask & m  # also: MC521

    def additive_bias(self, ys_in_lens: torch.Tensor, L: int, dtype: torch.dtype) -> torch.Tensor:
        neg = torch.finfo(dtype).min
        causal = torch.full((L, L), neg, dtype=dtype).triu(1)
        padding = make_pad_mask(ys_in_lens, L)[:, None, :].to(dtype) * neg
        return causal[None] + padding  # expect: MC513 method

    def forward(self, memory: torch.Tensor, memory_lens: torch.Tensor, ys_in_pad: torch.Tensor,
                ys_in_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(ys_in_pad)
        scores = torch.einsum("bld,bsd->bls", x, x) / x.size(-1) ** 0.5
        scores = scores + self.additive_bias(ys_in_lens, x.size(1), scores.dtype)
        x = torch.bmm(scores.softmax(-1), x)
        keep = self.tgt_keep_mask(ys_in_pad, ys_in_lens)
        for layer in self.self_attn:
            x = x + layer(x, memory, memory, memory_lens)
        return self.output_layer(x), keep.sum(-1)
