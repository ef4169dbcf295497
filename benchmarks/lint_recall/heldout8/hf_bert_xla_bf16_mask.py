"""Held-out 8: a Hugging Face BERT-style encoder (ModuleUtilsMixin.get_extended_attention_mask,
BertSelfAttention adding the extended mask) fine-tuned on TPU with XLA's bf16 downcast.

Source: huggingface/transformers PR #20562 and PR #20605 ("Clip floating point constants to bf16
range to avoid inf conversion": with XLA_USE_BF16=1 / XLA_DOWNCAST_BF16=1 the extended mask is bf16
but its fill is the float32 minimum, -3.4028e38, which bf16 cannot hold: it becomes -inf, and
`(1.0 - 1.0) * -inf` is NaN on XLA, where the scalar is converted before the product).
Surroundings: a mixin method, the downcast dtype chosen from os.environ by a helper, the mask
reaching the scores through the model's forward.
"""

import math
import os
from typing import Optional

import torch
from torch import nn


def _xla_downcast_dtype() -> Optional[torch.dtype]:
    if os.environ.get("XLA_USE_BF16") == "1" or os.environ.get("XLA_DOWNCAST_BF16") == "1":
        return torch.bfloat16
    return None


class ModuleUtilsMixin:
    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def get_extended_attention_mask(self, attention_mask: torch.Tensor, input_shape, dtype=None):
        if dtype is None:
            dtype = _xla_downcast_dtype() or self.dtype
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError(f"Wrong shape for input_ids (shape {input_shape}) or attention_mask "
                             f"(shape {attention_mask.shape})")
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(torch.float32).min  # expect: MC517|MC522 method
        return extended_attention_mask


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_attention_heads: int, dropout: float = 0.1):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(hidden_size, self.all_head_size)
        self.key = nn.Linear(hidden_size, self.all_head_size)
        self.value = nn.Linear(hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(dropout)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class BertModel(nn.Module, ModuleUtilsMixin):
    def __init__(self, vocab_size: int = 30522, hidden_size: int = 768, num_layers: int = 12,
                 num_attention_heads: int = 12):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(BertSelfAttention(hidden_size, num_attention_heads)
                                    for _ in range(num_layers))

    def forward(self, input_ids, attention_mask=None):
        input_shape = input_ids.size()
        if attention_mask is None:
            attention_mask = torch.ones(input_shape, device=input_ids.device)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, input_shape)
        hidden_states = self.embeddings(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended_attention_mask)
        return hidden_states
