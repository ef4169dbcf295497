"""Held-out 3 twin: the fill value comes from the dtype of the tensor being filled.

Source: the answer on dotnet/TorchSharp#1135 (fill with -inf), transformers' `_make_causal_mask`
(`torch.finfo(dtype).min` with `dtype` the mask's own dtype).
"""

import math

import torch
import torch.nn as nn


class HalfDecoderLayer(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        weight = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).half()
        mask = torch.ones_like(weight).triu(1).to(torch.bool)
        weight.masked_fill_(mask, -torch.inf)
        return self.out((weight.softmax(-1) @ v.half()).float().transpose(1, 2).reshape(b, n, d))


class BertSelfAttentionFp16(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, n, d = hidden_states.shape
        query_layer = self.query(hidden_states.float()).view(b, n, self.heads, -1).transpose(1, 2)
        key_layer = self.key(hidden_states).view(b, n, self.heads, -1).transpose(1, 2)
        value_layer = self.value(hidden_states).view(b, n, self.heads, -1).transpose(1, 2)
        attention_scores = torch.matmul(query_layer.half(), key_layer.half().transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(query_layer.size(-1))
        attention_scores = attention_scores.masked_fill(~(attention_mask[:, None, None, :].bool()), torch.finfo(attention_scores.dtype).min)
        probs = attention_scores.softmax(-1)
        return (probs @ value_layer.half()).transpose(1, 2).reshape(b, n, d)


def make_causal_mask(tgt_len: int, device: torch.device) -> torch.Tensor:
    dtype = torch.float16
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    return mask[None, None, :, :]
