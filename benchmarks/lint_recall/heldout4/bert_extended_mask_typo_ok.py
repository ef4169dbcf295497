"""Held-out 4 twin: the converted additive mask is returned, and BERT gets 1 at the real tokens.

Source: jerryji1993/DNABERT#102, nyu-mll/jiant#465, huggingface/transformers#13555.
"""

import math

import torch
import torch.nn as nn


class ModuleUtilsMixin:
    dtype = torch.float32

    def get_extended_attention_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        extended_attention_mask = attention_mask[:, None, None, :]
        extended_attention_mask = extended_attention_mask.to(dtype=self.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
        return extended_attention_mask


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(*new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.Softmax(dim=-1)(attention_scores)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (-1,))


class BertModel(nn.Module, ModuleUtilsMixin):
    def __init__(self, vocab: int, hidden: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.layer = nn.ModuleList(BertSelfAttention(hidden, heads) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extended_attention_mask = self.get_extended_attention_mask(attention_mask)
        hidden = self.embeddings(input_ids)
        for layer_module in self.layer:
            hidden = layer_module(hidden, extended_attention_mask)
        return hidden


class EdgeProbingModel(nn.Module):
    def __init__(self, bert: nn.Module, hidden: int, n_labels: int, pad_id: int = 0) -> None:
        super().__init__()
        self.bert = bert
        self.pad_id = pad_id
        self.classifier = nn.Linear(hidden, n_labels)

    def forward(self, ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        outputs = self.bert(ids, token_type_ids=segment_ids, attention_mask=(ids != self.pad_id).long())
        return self.classifier(outputs.last_hidden_state[:, 0])
