"""Held-out 3: float32 extremes written into half-precision attention weights at inference.

Source: dotnet/TorchSharp#1135 (`weight.masked_fill_(mask, -torch.finfo(torch.float32).max)` on a
half tensor: "value cannot be converted to type at::Half without overflow"; the issue's Python
version uses `-torch.inf`), InternLM/lmdeploy#3152 (`attention_scores.masked_fill(~(attention_mask),
torch.finfo(query_layer.dtype).min)` raising the same error once the scores are half),
samlhuillier/spider-sql-finetune#1 (`torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)`
raising in a half-precision causal-mask helper).
Surroundings: a decoder layer cast with `.half()`, a BERT-style forward with scores in fp16, a
causal-mask helper with an explicit half dtype.
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
        weight.masked_fill_(mask, -torch.finfo(torch.float32).max)  # expect: MC517 method
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
        attention_scores = attention_scores.masked_fill(~(attention_mask[:, None, None, :].bool()), torch.finfo(query_layer.dtype).min)  # expect: MC517 other-dtype
        probs = attention_scores.softmax(-1)
        return (probs @ value_layer.half()).transpose(1, 2).reshape(b, n, d)


def make_causal_mask(tgt_len: int, device: torch.device) -> torch.Tensor:
    mask = torch.full((tgt_len, tgt_len), torch.finfo(torch.float32).min, dtype=torch.float16, device=device)  # expect: MC517 full
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    return mask[None, None, :, :]
