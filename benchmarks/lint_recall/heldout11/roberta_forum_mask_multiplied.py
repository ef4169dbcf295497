"""Held-out 11: transformers 3.x RoBERTa (modeling_roberta.py: `RobertaEmbeddings` with
`create_position_ids_from_input_ids`, `RobertaSelfAttention`, `RobertaLayer`, `RobertaModel`) fed
by a dataset collate function that returns a dict batch.

Source: discuss.huggingface.co/t/clarification-on-the-attention-mask/1538 (forum thread
"Clarification on the attention_mask": quoting `attention_scores = attention_scores +
attention_mask` in RobertaSelfAttention, the asker "would think masking would be a multiplication
of attention scores with the attention_mask, not addition", and wants to use the mask as token
weights). The answer: the 1 / 0 mask is inverted to 0 / -10000 in the model and then added. The
proposal is the bug here: the collate's 1 / 0 mask multiplied into the scores before softmax gives
every padded key a logit of 0, so exp(0) of weight, as much as a real key with a zero score.
Surroundings: the mask built in the collate function, passed in a dict batch (`model(**batch)`),
reshaped in the model and handed by keyword to each layer.
"""

import math

import torch
from torch import nn

PAD_ID = 1


def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = torch.cumsum(mask, dim=1).type_as(mask) * mask
    return incremental_indices.long() + padding_idx


def collate(batch_token_lists):
    max_len = max(len(t) for t in batch_token_lists)
    input_ids = torch.full((len(batch_token_lists), max_len), PAD_ID, dtype=torch.long)
    for i, toks in enumerate(batch_token_lists):
        input_ids[i, :len(toks)] = torch.tensor(toks)
    attention_mask = input_ids.ne(PAD_ID).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class RobertaEmbeddings(nn.Module):
    def __init__(self, vocab_size=100, hidden_size=64, max_position_embeddings=66):
        super().__init__()
        self.padding_idx = PAD_ID
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size, padding_idx=PAD_ID)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-5)

    def forward(self, input_ids):
        position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(position_ids))


class RobertaSelfAttention(nn.Module):
    def __init__(self, hidden_size=64, num_attention_heads=4):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = hidden_size
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
            # Apply the attention mask is (precomputed for all layers in RobertaModel forward() function)
            attention_scores = attention_scores * attention_mask  # expect: MC520 dict
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(*context_layer.size()[:-2], self.all_head_size)


class RobertaLayer(nn.Module):
    def __init__(self, hidden_size=64):
        super().__init__()
        self.attention = RobertaSelfAttention(hidden_size)
        self.attention_norm = nn.LayerNorm(hidden_size, eps=1e-5)
        self.intermediate = nn.Linear(hidden_size, 4 * hidden_size)
        self.output = nn.Linear(4 * hidden_size, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=1e-5)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention_norm(hidden_states + self.attention(hidden_states, attention_mask=attention_mask))
        layer_output = self.output(nn.functional.gelu(self.intermediate(attention_output)))
        return self.output_norm(layer_output + attention_output)


class RobertaModel(nn.Module):
    def __init__(self, num_hidden_layers=2, hidden_size=64):
        super().__init__()
        self.embeddings = RobertaEmbeddings(hidden_size=hidden_size)
        self.layer = nn.ModuleList([RobertaLayer(hidden_size) for _ in range(num_hidden_layers)])

    def forward(self, input_ids=None, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype=torch.float32)
        hidden_states = self.embeddings(input_ids)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask=extended_attention_mask)
        return hidden_states
