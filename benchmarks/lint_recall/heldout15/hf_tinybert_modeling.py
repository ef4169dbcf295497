"""Held-out 15: a Hugging Face-style modeling file (`modeling_tinybert.py`) for a small BERT
encoder with a config class, embeddings, eager self-attention, an encoder stack, a pooler and a
sequence-classification head, laid out the way transformers' modeling files are.

Source: pytorch/pytorch#103963 (a 0/1 float mask given as an additive mask masks nothing),
huggingface/transformers#46458 (4-D float masks holding 0.0 / 1.0 instead of 0 / -inf),
conventions.md §2.9. `get_extended_attention_mask` broadcasts the tokenizer's attention_mask and
casts it to the model dtype but leaves out the `(1.0 - mask) * finfo.min` step; eager attention
adds it to the scores, so the padding keeps its weight.
"""

import math
from typing import Optional, Tuple

import torch
from torch import nn


class TinyBertConfig:
    model_type = "tinybert"

    def __init__(self, vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 max_position_embeddings=128, type_vocab_size=2, layer_norm_eps=1e-12,
                 pad_token_id=0, num_labels=2):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.layer_norm_eps = layer_norm_eps
        self.pad_token_id = pad_token_id
        self.num_labels = num_labels


class TinyBertEmbeddings(nn.Module):
    def __init__(self, config: TinyBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None, :], persistent=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        seq_length = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(self.position_ids[:, :seq_length])
        return self.dropout(self.LayerNorm(embeddings))


class TinyBertSelfAttention(nn.Module):
    def __init__(self, config: TinyBertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.num_attention_heads, self.attention_head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask  # expect: MC508 hf-model
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(hidden_states.shape), attention_probs


class TinyBertLayer(nn.Module):
    def __init__(self, config: TinyBertConfig):
        super().__init__()
        self.attention = TinyBertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU())
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        context, _ = self.attention(hidden_states, attention_mask)
        hidden_states = self.attention_norm(hidden_states + self.dropout(self.attention_output(context)))
        return self.output_norm(hidden_states + self.dropout(self.output(self.intermediate(hidden_states))))


class TinyBertModel(nn.Module):
    def __init__(self, config: TinyBertConfig):
        super().__init__()
        self.config = config
        self.embeddings = TinyBertEmbeddings(config)
        self.layer = nn.ModuleList([TinyBertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh())

    @property
    def dtype(self) -> torch.dtype:
        return self.embeddings.word_embeddings.weight.dtype

    def get_extended_attention_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # (batch, seq_len) -> (batch, 1, 1, seq_len): broadcast over heads and query positions
        extended_attention_mask = attention_mask[:, None, None, :]
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # also: MC508
        return extended_attention_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, self.dtype)
        hidden_states = self.embeddings(input_ids, token_type_ids)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        return hidden_states, self.pooler(hidden_states[:, 0])


class TinyBertForSequenceClassification(nn.Module):
    def __init__(self, config: TinyBertConfig):
        super().__init__()
        self.bert = TinyBertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        _, pooled_output = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits = self.classifier(self.dropout(pooled_output))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits
