"""Held-out 11: transformers 3.x BERT (modeling_utils.py `ModuleUtilsMixin.get_extended_attention_mask`,
modeling_bert.py `BertPreTrainedModel`, `BertSelfAttention`, `BertLayer`, `BertModel`) and a
tokenizer-style batch dict whose `attention_mask` is `[1] * len(input_ids)` padded with 0.

Source: huggingface/transformers#5295 ("Is summing of attention_mask intended?": the asker reads
`attention_scores = attention_scores + attention_mask` in BertSelfAttention and, in the thread,
points out that the tokenizer makes the mask as `[1] * len(encoded_inputs["input_ids"])`). The
maintainers answered that the summed mask is the extended one (0 / -10000) made by
`get_extended_attention_mask`. The reading in the question is the bug here: the tokenizer's 1 / 0
mask reaching the sum unconverted adds 1 to the real keys and 0 to the padding, masking nothing.
Surroundings: the mask converted (or not) by a helper the model inherits from a mixin, then handed
by keyword through the layers to the self-attention.
"""

import math

import torch
from torch import nn

PAD_ID = 0


def batch_encode(token_lists, max_length):
    input_ids, attention_mask = [], []
    for toks in token_lists:
        difference = max_length - len(toks)
        input_ids.append(toks + [PAD_ID] * difference)
        attention_mask.append([1] * len(toks) + [0] * difference)
    return {"input_ids": torch.tensor(input_ids), "attention_mask": torch.tensor(attention_mask)}


class ModuleUtilsMixin:
    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def get_extended_attention_mask(self, attention_mask, input_shape, device):
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError("Wrong shape for input_ids (shape {}) or attention_mask (shape {})".format(
                input_shape, attention_mask.shape))
        extended_attention_mask = extended_attention_mask.to(dtype=self.dtype)  # expect: MC508 helper
        return extended_attention_mask


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)

    def transpose_for_scores(self, x):
        x = x.view(*x.size()[:-1], self.num_attention_heads, self.attention_head_size)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # Apply the attention mask is (precomputed for all layers in BertModel forward() function)
            attention_scores = attention_scores + attention_mask  # also: MC508
        attention_probs = nn.Softmax(dim=-1)(attention_scores)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(*context_layer.size()[:-2], -1)


class BertLayer(nn.Module):
    def __init__(self, hidden_size, num_attention_heads):
        super().__init__()
        self.attention = BertSelfAttention(hidden_size, num_attention_heads)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(hidden_size, 4 * hidden_size)
        self.output = nn.Linear(4 * hidden_size, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=1e-12)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention_norm(hidden_states + self.attention(hidden_states, attention_mask=attention_mask))
        return self.output_norm(attention_output + self.output(nn.functional.gelu(self.intermediate(attention_output))))


class BertPreTrainedModel(nn.Module, ModuleUtilsMixin):
    pass


class BertModel(BertPreTrainedModel):
    def __init__(self, vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(64, hidden_size)
        self.layer = nn.ModuleList([BertLayer(hidden_size, num_attention_heads) for _ in range(num_hidden_layers)])

    def forward(self, input_ids=None, attention_mask=None):
        input_shape = input_ids.size()
        if attention_mask is None:
            attention_mask = torch.ones(input_shape, device=input_ids.device)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, input_shape, input_ids.device)
        positions = torch.arange(input_shape[1], device=input_ids.device)[None, :]
        hidden_states = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask=extended_attention_mask)
        return hidden_states
