"""Held-out 9 (correct twin): optimum-habana's BERT on Gaudi (`gaudi_get_extended_attention_mask` patched onto
transformers' `ModuleUtilsMixin`, a `GaudiConfig` switching Habana mixed precision on, the mask
consumed by `BertSelfAttention`).

Source: the fix of huggingface/optimum-habana PR #92 (the minimum of the mask's own dtype; the report: "Change the logic to manage torch.finfo(dtype).min":
with Habana mixed precision the extended mask is bf16 while the module's parameters, hence
`self.dtype`, stay float32, so `(1.0 - mask) * torch.finfo(self.dtype).min` writes the float32
minimum into a bf16 tensor, where it is -inf; the fix takes the minimum of the mask's own dtype).
Surroundings: a config flag choosing the working dtype, the mask helper patched onto the model
class, the extended mask reaching the attention through the encoder's layers.
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import nn


@dataclass
class GaudiConfig:
    use_habana_mixed_precision: bool = False
    hmp_is_verbose: bool = False


def gaudi_get_extended_attention_mask(self, attention_mask: torch.Tensor, input_shape: Tuple[int],
                                      device: Optional[torch.device] = None,
                                      dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Copied from ModuleUtilsMixin.get_extended_attention_mask, with the mask kept in the
    working dtype of Habana mixed precision."""
    if dtype is None:
        dtype = self.dtype

    if attention_mask.dim() == 3:
        extended_attention_mask = attention_mask[:, None, :, :]
    elif attention_mask.dim() == 2:
        extended_attention_mask = attention_mask[:, None, None, :]
    else:
        raise ValueError(
            f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})"
        )

    extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # bf16 compatibility
    extended_attention_mask = 1.0 - extended_attention_mask
    extended_attention_mask = extended_attention_mask * torch.finfo(extended_attention_mask.dtype).min
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

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))

        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask

        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class GaudiBertModel(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int,
                 gaudi_config: GaudiConfig):
        super().__init__()
        self.gaudi_config = gaudi_config
        self.embeddings = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(
            [BertSelfAttention(hidden_size, num_heads) for _ in range(num_layers)]
        )

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    get_extended_attention_mask = gaudi_get_extended_attention_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        input_shape = input_ids.size()
        if attention_mask is None:
            attention_mask = torch.ones(input_shape, device=input_ids.device)

        working_dtype = torch.bfloat16 if self.gaudi_config.use_habana_mixed_precision else self.dtype
        extended_attention_mask = self.get_extended_attention_mask(
            attention_mask, input_shape, dtype=working_dtype
        )

        hidden_states = self.embeddings(input_ids).to(working_dtype)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=extended_attention_mask)
        return hidden_states
