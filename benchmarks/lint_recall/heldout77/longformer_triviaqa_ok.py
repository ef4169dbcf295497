"""Longformer extractive question answering over long TriviaQA evidence documents.

Sliding-window local attention with global attention on the question tokens
(separate query_global / key_global / value_global projections), inputs padded
to a multiple of the attention window, and a span head restricted to the context,
following the Hugging Face Longformer layout.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); huggingface/transformers#32195 (conventions.md §3 item 25)
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class TriviaTokenizer:
    cls_token_id, sep_token_id, pad_token_id = 1, 2, 0

    def __init__(self, vocab_size=1000):
        self.vocab_size = vocab_size

    def _ids(self, text):
        return [3 + sum(map(ord, w)) % (self.vocab_size - 3) for w in text.lower().split()]

    def __call__(self, questions, contexts, return_tensors="pt", padding=True):
        rows, q_lens = [], []
        for question, context in zip(questions, contexts):
            q = self._ids(question)
            rows.append([self.cls_token_id] + q + [self.sep_token_id] + self._ids(context) + [self.sep_token_id])
            q_lens.append(len(q) + 2)
        n = max(map(len, rows))
        input_ids = torch.full((len(rows), n), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        global_attention_mask = torch.zeros_like(input_ids)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
            global_attention_mask[i, : q_lens[i]] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask, "global_attention_mask": global_attention_mask}


class LongformerSelfAttention(nn.Module):
    def __init__(self, config, layer_id):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.embed_dim = config.hidden_size
        for name in ("query", "key", "value", "query_global", "key_global", "value_global"):
            setattr(self, name, nn.Linear(self.embed_dim, self.embed_dim))
        self.one_sided_attn_window_size = config.attention_window[layer_id] // 2

    def _heads(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, is_index_masked, is_index_global_attn):
        n = hidden_states.size(1)
        q, k, v = (self._heads(p(hidden_states)) for p in (self.query, self.key, self.value))
        pos = torch.arange(n, device=hidden_states.device)
        band = (pos[None, :] - pos[:, None]).abs() <= self.one_sided_attn_window_size
        local_keep = (band[None] | is_index_global_attn[:, None, :]) & ~is_index_masked[:, None, :]
        local_out = F.scaled_dot_product_attention(q, k, v, attn_mask=local_keep[:, None])

        q_global = self._heads(self.query_global(hidden_states))
        k_global = self._heads(self.key_global(hidden_states))
        v_global = self._heads(self.value_global(hidden_states))
        global_out = F.scaled_dot_product_attention(
            q_global, k_global, v_global,
            attn_mask=(~is_index_masked)[:, None, None, :],
        )
        out = torch.where(is_index_global_attn[:, None, :, None], global_out, local_out)
        return out.transpose(1, 2).reshape(hidden_states.shape)


class LongformerLayer(nn.Module):
    def __init__(self, config, layer_id):
        super().__init__()
        self.attention = LongformerSelfAttention(config, layer_id)
        self.attn_norm = nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                 nn.Linear(config.intermediate_size, config.hidden_size))
        self.ffn_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, is_index_masked, is_index_global_attn):
        hidden_states = self.attn_norm(hidden_states + self.attention(hidden_states, is_index_masked, is_index_global_attn))
        return self.ffn_norm(hidden_states + self.ffn(hidden_states))


class LongformerForQuestionAnswering(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList([LongformerLayer(config, i) for i in range(config.num_hidden_layers)])
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    def _pad_to_window_size(self, input_ids, attention_mask, global_attention_mask):
        window = max(self.config.attention_window)
        padding_len = (window - input_ids.shape[1] % window) % window
        if padding_len > 0:
            input_ids = F.pad(input_ids, (0, padding_len), value=self.config.pad_token_id)
            attention_mask = F.pad(attention_mask, (0, padding_len), value=0)
            global_attention_mask = F.pad(global_attention_mask, (0, padding_len), value=0)
        return padding_len, input_ids, attention_mask, global_attention_mask

    def forward(self, input_ids, attention_mask=None, global_attention_mask=None,
                start_positions=None, end_positions=None):
        n = input_ids.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if global_attention_mask is None:
            global_attention_mask = torch.zeros_like(input_ids)
        padding_len, input_ids, attention_mask, global_attention_mask = self._pad_to_window_size(
            input_ids, attention_mask, global_attention_mask)
        merged = attention_mask * (global_attention_mask + 1)
        is_index_masked = merged == 0
        is_index_global_attn = merged > 1

        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden_states = self.embeddings(input_ids) + self.position_embeddings(position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, is_index_masked, is_index_global_attn)
        hidden_states = hidden_states[:, :n]

        start_logits, end_logits = self.qa_outputs(hidden_states).unbind(-1)
        not_context = (is_index_masked | is_index_global_attn)[:, :n]
        start_logits = start_logits.masked_fill(not_context, torch.finfo(start_logits.dtype).min)
        end_logits = end_logits.masked_fill(not_context, torch.finfo(end_logits.dtype).min)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)) / 2
        return SimpleNamespace(loss=loss, start_logits=start_logits, end_logits=end_logits)


if __name__ == "__main__":
    torch.manual_seed(0)
    config = SimpleNamespace(vocab_size=1000, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                             num_hidden_layers=2, attention_window=[4, 4], max_position_embeddings=128, pad_token_id=0)
    tokenizer = TriviaTokenizer(config.vocab_size)
    questions = ["which river flows through vienna", "who wrote the novel middlemarch"]
    contexts = ["the danube flows through vienna budapest and belgrade before reaching the black sea",
                "middlemarch is a novel by george eliot published in eight parts"]
    batch = tokenizer(questions, contexts, return_tensors="pt")
    model = LongformerForQuestionAnswering(config)
    out = model(**batch, start_positions=torch.tensor([8, 14]), end_positions=torch.tensor([8, 15]))
    out.loss.backward()
    print("loss", round(out.loss.item(), 4), "start", out.start_logits.argmax(-1).tolist())
