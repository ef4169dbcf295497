"""Held-out 4 twin: masks for a model exported and run in
bfloat16 that are filled with the float32 minimum (which bfloat16 rounds to -inf, or refuses).

Source: espnet/espnet#4584 ("use torch.finfo for dtype other than float": `scores.masked_fill(mask,
min_value)` with the float32 minimum raises `value cannot be converted to type at::BFloat16
without overflow`), huggingface/optimum-intel#655 ("[Gemma][Llama] fix bf16 min_dtype": the
float32 `min_dtype` of `_update_causal_mask` becomes -inf once converted to bfloat16).
Surroundings: the minimum held in a name and used to fill scores cast to bfloat16 in a method;
a causal-mask builder that makes a bfloat16 `torch.full` with a `fill_value=` keyword.
"""

import math

import torch
import torch.nn as nn


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int) -> None:
        super().__init__()
        self.h = n_head
        self.d_k = n_feat // n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)

    def forward_attention(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        min_value = torch.finfo(torch.bfloat16).min
        scores = scores.to(torch.bfloat16).masked_fill(mask, min_value)
        return torch.softmax(scores, dim=-1)

    def forward(self, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = query.size(0)
        q = self.linear_q(query).view(b, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(b, -1, self.h, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(scores, mask)


def update_causal_mask(attention_mask: torch.Tensor, sequence_length: int, target_length: int,
                       device: torch.device) -> torch.Tensor:
    min_dtype = torch.finfo(torch.bfloat16).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=torch.bfloat16, device=device)
    causal_mask = torch.triu(causal_mask, diagonal=1)
    padding = attention_mask[:, None, None, :] == 0
    return causal_mask[None, None].masked_fill(padding, torch.finfo(torch.bfloat16).min)
