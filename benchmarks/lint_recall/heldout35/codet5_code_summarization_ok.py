"""CodeT5-style code summarization (code -> docstring): a T5 encoder-decoder with relative position
buckets, RMS layer norm, tied embeddings, a regex code tokenizer and greedy generation.

Source: conventions.md §1 (HF 2-D attention_mask row), §2.4 and §2.7, tools.md §0 P2.
"""

import math
import random
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class T5Config:
    vocab_size: int = 128
    d_model: int = 64
    d_kv: int = 16
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 64
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    pad_token_id: int = 0
    decoder_start_token_id: int = 0


class CodeTokenizer:
    def __init__(self, corpus):
        self.vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
        for text in corpus:
            for tok in re.findall(r"\w+|[^\w\s]", text):
                self.vocab.setdefault(tok, len(self.vocab))
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}

    def __call__(self, texts, max_length=48):
        ids = [[self.vocab.get(t, 3) for t in re.findall(r"\w+|[^\w\s]", x)][: max_length - 1] + [2] for x in texts]
        n = max(len(x) for x in ids)
        return {
            "input_ids": torch.tensor([x + [0] * (n - len(x)) for x in ids], dtype=torch.long),
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids], dtype=torch.long),
        }

    def decode(self, ids):
        return " ".join(self.ids_to_tokens[i] for i in ids if i > 2)


def invert_attention_mask(encoder_attention_mask, dtype):
    """Invert an attention mask into an additive bias over the key axis."""
    extended = encoder_attention_mask[:, None, None, :]
    return torch.zeros(extended.shape, dtype=dtype, device=extended.device).masked_fill(extended == 0, torch.finfo(dtype).min)


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(hidden_size)), eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class T5Attention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
        super().__init__()
        self.is_decoder, self.has_relative_attention_bias = is_decoder, has_relative_attention_bias
        self.n_heads, self.key_value_proj_dim = config.num_heads, config.d_kv
        self.num_buckets, self.max_distance = config.relative_attention_num_buckets, config.relative_attention_max_distance
        inner_dim = self.n_heads * self.key_value_proj_dim
        self.q, self.k = nn.Linear(config.d_model, inner_dim, bias=False), nn.Linear(config.d_model, inner_dim, bias=False)
        self.v, self.o = nn.Linear(config.d_model, inner_dim, bias=False), nn.Linear(inner_dim, config.d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.num_buckets, self.n_heads)
        self.dropout = config.dropout_rate

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        return relative_buckets + torch.where(is_small, relative_position, relative_position_if_large)

    def compute_bias(self, query_length, key_length, device=None):
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = self._relative_position_bucket(
            memory_position - context_position, not self.is_decoder, self.num_buckets, self.max_distance
        )
        return self.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        kv = hidden_states if key_value_states is None else key_value_states

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        query_states, key_states, value_states = shape(self.q(hidden_states)), shape(self.k(kv)), shape(self.v(kv))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            if self.has_relative_attention_bias:
                position_bias = self.compute_bias(seq_length, key_states.size(2), device=scores.device)
            else:
                position_bias = torch.zeros((1, self.n_heads, seq_length, key_states.size(2)), dtype=scores.dtype)
            if mask is not None:
                position_bias = position_bias + mask
        attn_weights = F.softmax((scores + position_bias).float(), dim=-1).type_as(scores)
        attn_weights = F.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).reshape(batch_size, seq_length, -1)
        return self.o(attn_output), position_bias


class T5Block(nn.Module):
    def __init__(self, config, has_relative_attention_bias, is_decoder):
        super().__init__()
        self.self_attn = T5Attention(config, has_relative_attention_bias, is_decoder)
        self.self_attn_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.cross_attn = T5Attention(config, False, is_decoder) if is_decoder else None
        self.cross_attn_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon) if is_decoder else None
        self.ff = nn.Sequential(nn.Linear(config.d_model, config.d_ff, bias=False), nn.ReLU(), nn.Linear(config.d_ff, config.d_model, bias=False))
        self.ff_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states, attention_mask, position_bias, encoder_hidden_states=None,
                encoder_attention_mask=None, encoder_decoder_position_bias=None):
        attn, position_bias = self.self_attn(self.self_attn_norm(hidden_states), mask=attention_mask, position_bias=position_bias)
        hidden_states = hidden_states + self.dropout(attn)
        if self.cross_attn is not None:
            attn, encoder_decoder_position_bias = self.cross_attn(
                self.cross_attn_norm(hidden_states), mask=encoder_attention_mask, key_value_states=encoder_hidden_states,
                position_bias=encoder_decoder_position_bias)
            hidden_states = hidden_states + self.dropout(attn)
        hidden_states = hidden_states + self.dropout(self.ff(self.ff_norm(hidden_states)))
        return hidden_states, position_bias, encoder_decoder_position_bias


class T5Stack(nn.Module):
    def __init__(self, config, embed_tokens, is_decoder=False):
        super().__init__()
        self.embed_tokens, self.is_decoder = embed_tokens, is_decoder
        self.block = nn.ModuleList([T5Block(config, i == 0, is_decoder) for i in range(config.num_layers)])
        self.final_layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, input_ids, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None):
        hidden_states = self.dropout(self.embed_tokens(input_ids))
        dtype, seq_length = hidden_states.dtype, input_ids.size(1)
        encoder_extended_attention_mask = None
        if self.is_decoder:
            causal = torch.ones(seq_length, seq_length, dtype=torch.bool, device=input_ids.device).tril()
            extended_attention_mask = torch.zeros(1, 1, seq_length, seq_length, dtype=dtype).masked_fill(~causal, torch.finfo(dtype).min)
            encoder_extended_attention_mask = invert_attention_mask(encoder_attention_mask, dtype)
        else:
            extended_attention_mask = invert_attention_mask(attention_mask, dtype)
        position_bias = encoder_decoder_position_bias = None
        for layer_module in self.block:
            hidden_states, position_bias, encoder_decoder_position_bias = layer_module(
                hidden_states, extended_attention_mask, position_bias, encoder_hidden_states, encoder_extended_attention_mask,
                encoder_decoder_position_bias)
        return self.dropout(self.final_layer_norm(hidden_states))


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared)
        self.decoder = T5Stack(config, self.shared, is_decoder=True)

    def _shift_right(self, input_ids):
        shifted = input_ids.new_full(input_ids.shape, self.config.decoder_start_token_id)
        shifted[..., 1:] = input_ids[..., :-1].clone()
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def forward(self, input_ids, attention_mask, decoder_input_ids=None, labels=None, encoder_outputs=None):
        encoder_outputs = self.encoder(input_ids, attention_mask=attention_mask) if encoder_outputs is None else encoder_outputs
        decoder_input_ids = self._shift_right(labels) if decoder_input_ids is None else decoder_input_ids
        sequence_output = self.decoder(decoder_input_ids, encoder_hidden_states=encoder_outputs, encoder_attention_mask=attention_mask)
        lm_logits = (sequence_output * self.config.d_model**-0.5) @ self.shared.weight.T
        loss = F.cross_entropy(lm_logits.flatten(0, 1), labels.flatten(), ignore_index=-100) if labels is not None else None
        return loss, lm_logits, encoder_outputs

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_length=12):
        encoder_outputs = self.encoder(input_ids, attention_mask=attention_mask)
        decoder_input_ids = torch.full((input_ids.size(0), 1), self.config.decoder_start_token_id)
        for _ in range(max_length):
            _, logits, _ = self(input_ids, attention_mask, decoder_input_ids=decoder_input_ids, encoder_outputs=encoder_outputs)
            decoder_input_ids = torch.cat([decoder_input_ids, logits[:, -1:].argmax(-1)], dim=1)
        return decoder_input_ids


SUMMARIES = {"max": "the largest", "min": "the smallest", "sum": "the total", "len": "the number", "sorted": "a sorted copy", "set": "the distinct"}


def make_pair(rng):
    fn, arg = rng.choice(list(SUMMARIES)), rng.choice(["items", "values", "xs", "scores", "row_values", "data"])
    name = rng.choice(["get", "compute", "find", "calc"]) + "_" + fn
    body = f"return {fn}({arg})" if rng.random() < 0.5 else f"result = {fn}({arg})\n    return result"
    return f"def {name}({arg}):\n    {body}", f"Return {SUMMARIES[fn]} of {arg}."


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    pairs = [make_pair(rng) for _ in range(1000)]
    tokenizer = CodeTokenizer([t for p in pairs for t in p])
    model = T5ForConditionalGeneration(T5Config(vocab_size=len(tokenizer.vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    try:
        for step in range(200):
            code, docs = zip(*rng.sample(pairs, 32))
            batch, targets = tokenizer(code), tokenizer(docs)
            batch["labels"] = targets["input_ids"].masked_fill(targets["attention_mask"] == 0, -100)
            loss, _, _ = model(**batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 50 == 0:
                print(f"step {step} loss {loss.item():.3f}")
    except RuntimeError as err:
        print("training failed:", err)
        raise SystemExit(0) from None
    model.eval()
    code, docs = zip(*[make_pair(random.Random(i)) for i in range(16)])
    batch = tokenizer(code)
    outputs = model.generate(batch["input_ids"], batch["attention_mask"])
    hyps = [tokenizer.decode(row[1 : row.index(2)] if 2 in row else row[1:]) for row in outputs.tolist()]
    print("exact match", sum(h == tokenizer.decode(tokenizer([d])["input_ids"][0].tolist()) for h, d in zip(hyps, docs)), "/ 16")
    n = int(batch["attention_mask"][0].sum())
    alone = model.generate(batch["input_ids"][:1, :n], batch["attention_mask"][:1, :n])
    print("first summary batched vs alone:", outputs[0].tolist() == alone[0].tolist())
