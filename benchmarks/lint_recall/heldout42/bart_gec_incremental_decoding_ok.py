"""Grammatical error correction as sequence-to-sequence rewriting with a BART-style model.

A small encoder-decoder in transformers' modeling_bart.py layout (BartAttention on
scaled_dot_product_attention with a key/value cache, BartEncoderLayer / BartDecoderLayer,
shift_tokens_right, a tied LM head), fine-tuned on synthetic learner errors (articles,
subject-verb agreement, plurals), decoded greedily with the cache and scored by sentence-level
exact match, as in the BEA-2019 style evaluation of corrections.

Source: conventions.md section 1 (SDPA is_causal row) and section 2.7, pytorch/pytorch PR #111007 (conventions.md section 1), conventions.md section 5 item 8
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SUBJECTS = {"he": "goes", "she": "reads", "it": "runs", "they": "go", "we": "read"}
BASE = {"goes": "go", "reads": "read", "runs": "run", "go": "go", "read": "read"}
NOUNS = ["apple", "egg", "book", "cat", "idea", "dog", "orange", "car"]


@dataclass
class BartConfig:
    vocab_size: int
    d_model: int = 64
    encoder_layers: int = 2
    decoder_layers: int = 2
    attention_heads: int = 4
    ffn_dim: int = 128
    dropout: float = 0.1
    max_position_embeddings: int = 32
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    decoder_start_token_id: int = 2


class BartAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, is_decoder=False, is_causal=False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.is_decoder = is_decoder
        self.is_causal = is_causal
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, key_value_states=None, past_key_value=None, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self._shape(self.q_proj(hidden_states), tgt_len, bsz)
        if key_value_states is not None and past_key_value is not None:
            key_states, value_states = past_key_value
        elif key_value_states is not None:
            key_states = self._shape(self.k_proj(key_value_states), -1, bsz)
            value_states = self._shape(self.v_proj(key_value_states), -1, bsz)
        elif past_key_value is not None:
            key_states = torch.cat([past_key_value[0], self._shape(self.k_proj(hidden_states), -1, bsz)], dim=2)
            value_states = torch.cat([past_key_value[1], self._shape(self.v_proj(hidden_states), -1, bsz)], dim=2)
        else:
            key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
            value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        present = (key_states, value_states) if self.is_decoder else None
        attn_output = F.scaled_dot_product_attention(
            query_states, key_states, value_states, attn_mask=attention_mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.is_causal and attention_mask is None and past_key_value is None,
        )
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, -1)
        return self.out_proj(attn_output), present


class BartEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = BartAttention(config.d_model, config.attention_heads, config.dropout)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.fc1, self.fc2 = nn.Linear(config.d_model, config.ffn_dim), nn.Linear(config.ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model)
        self.dropout = config.dropout

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        hidden_states, _ = self.self_attn(hidden_states, attention_mask=attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))
        residual = hidden_states
        hidden_states = self.fc2(F.gelu(self.fc1(hidden_states)))
        return self.final_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))


class BartDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = BartAttention(config.d_model, config.attention_heads, config.dropout, is_decoder=True, is_causal=True)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = BartAttention(config.d_model, config.attention_heads, config.dropout, is_decoder=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.fc1, self.fc2 = nn.Linear(config.d_model, config.ffn_dim), nn.Linear(config.ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model)
        self.dropout = config.dropout

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask, past_key_value=None):
        self_attn_past = past_key_value[:2] if past_key_value is not None else None
        cross_attn_past = past_key_value[2:] if past_key_value is not None else None
        residual = hidden_states
        hidden_states, self_present = self.self_attn(hidden_states, past_key_value=self_attn_past)
        hidden_states = self.self_attn_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))
        residual = hidden_states
        hidden_states, cross_present = self.encoder_attn(hidden_states, key_value_states=encoder_hidden_states,
                                                         past_key_value=cross_attn_past, attention_mask=encoder_attention_mask)
        hidden_states = self.encoder_attn_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))
        residual = hidden_states
        hidden_states = self.fc2(F.gelu(self.fc1(hidden_states)))
        hidden_states = self.final_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))
        return hidden_states, self_present + cross_present


def shift_tokens_right(input_ids, pad_token_id, decoder_start_token_id):
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class BartForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.d_model)
        self.encoder_layers = nn.ModuleList(BartEncoderLayer(config) for _ in range(config.encoder_layers))
        self.decoder_layers = nn.ModuleList(BartDecoderLayer(config) for _ in range(config.decoder_layers))
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        self.decoder_layernorm_embedding = nn.LayerNorm(config.d_model)

    def encode(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden_states = self.layernorm_embedding(self.shared(input_ids) + self.embed_positions(positions))
        encoder_attention_mask = attention_mask[:, None, None, :].bool()
        for layer in self.encoder_layers:
            hidden_states = layer(hidden_states, encoder_attention_mask)
        return hidden_states, encoder_attention_mask

    def decode(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask, past_key_values=None, past_length=0):
        positions = torch.arange(past_length, past_length + decoder_input_ids.size(1), device=decoder_input_ids.device)
        hidden_states = self.decoder_layernorm_embedding(self.shared(decoder_input_ids) + self.embed_positions(positions))
        next_cache = []
        for i, layer in enumerate(self.decoder_layers):
            hidden_states, present = layer(hidden_states, encoder_hidden_states, encoder_attention_mask,
                                           past_key_values[i] if past_key_values is not None else None)
            next_cache.append(present)
        return F.linear(hidden_states, self.shared.weight), next_cache

    def forward(self, input_ids, attention_mask, labels):
        decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        encoder_hidden_states, encoder_attention_mask = self.encode(input_ids, attention_mask)
        lm_logits, _ = self.decode(decoder_input_ids, encoder_hidden_states, encoder_attention_mask)
        return F.cross_entropy(lm_logits.transpose(1, 2), labels, ignore_index=-100)

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_length=12, use_cache=True):
        encoder_hidden_states, encoder_attention_mask = self.encode(input_ids, attention_mask)
        generated = torch.full((input_ids.size(0), 1), self.config.decoder_start_token_id, dtype=torch.long)
        past_key_values = None
        for _ in range(max_length):
            if use_cache:
                logits, past_key_values = self.decode(generated[:, -1:], encoder_hidden_states, encoder_attention_mask,
                                                      past_key_values, past_length=generated.size(1) - 1)
            else:
                logits, _ = self.decode(generated, encoder_hidden_states, encoder_attention_mask)
            generated = torch.cat([generated, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return generated[:, 1:]


class WordTokenizer:
    def __init__(self):
        words = ["<pad>", "<s>", "</s>", "a", "an", "the", "two", "three", "every", "day", "and", "likes", "like", "."]
        words += list(SUBJECTS) + sorted(set(SUBJECTS.values()) | set(BASE.values()) | {"run"}) + NOUNS + [n + "s" for n in NOUNS]
        self.vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
        self.inv = {i: w for w, i in self.vocab.items()}

    def __call__(self, sentences):
        ids = [[self.vocab[w] for w in s.split()] + [2] for s in sentences]
        width = max(len(x) for x in ids)
        return {"input_ids": torch.tensor([x + [0] * (width - len(x)) for x in ids]),
                "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])}

    def decode(self, ids):
        words = [self.inv[i] for i in ids]
        return " ".join(words[: words.index("</s>")] if "</s>" in words else words)


def learner_pair(rng):
    subj = rng.choice(list(SUBJECTS))
    verb, noun = SUBJECTS[subj], rng.choice(NOUNS)
    article = "an" if noun[0] in "aeiou" else "a"
    count = rng.choice(["two", "three"])
    correct = f"{subj} {verb} and {subj} {'like' if subj in ('they', 'we') else 'likes'} {article} {noun} and {count} {noun}s ."
    words = correct.split()
    for _ in range(rng.randint(1, 2)):
        kind = rng.randrange(3)
        if kind == 0:
            words[5] = "a" if article == "an" else "an"
        elif kind == 1:
            words[1] = BASE[verb] if verb != BASE[verb] else {"go": "goes", "read": "reads"}[verb]
        else:
            words[-2] = noun
    return " ".join(words), correct


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    tok = WordTokenizer()
    model = BartForConditionalGeneration(BartConfig(vocab_size=len(tok.vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(300):
        model.train()
        pairs = [learner_pair(rng) for _ in range(32)]
        enc, tgt = tok([p[0] for p in pairs]), tok([p[1] for p in pairs])
        labels = tgt["input_ids"].masked_fill(tgt["attention_mask"] == 0, -100)
        loss = model(enc["input_ids"], enc["attention_mask"], labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    test = [learner_pair(random.Random(10_000 + i)) for i in range(200)]
    enc = tok([p[0] for p in test])
    for use_cache in (False, True):
        out = model.generate(enc["input_ids"], enc["attention_mask"], max_length=14, use_cache=use_cache)
        exact = sum(tok.decode(o) == p[1] for o, p in zip(out.tolist(), test)) / len(test)
        print(f"use_cache={use_cache}: exact match {exact:.3f}  e.g. {tok.decode(out[0].tolist())!r}")


if __name__ == "__main__":
    main()
