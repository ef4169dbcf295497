"""CodeT5-style span-corruption pre-training of a small T5 encoder-decoder on code tokens.

Laid out after salesforce/CodeT5 and transformers' ``modeling_t5.py``: a ``CodeTokenizer``, the
sentinel rewrite of the T5 span-corruption collator, ``T5LayerNorm``, ``T5Attention`` with the
bucketed relative position bias of the first layer, ``T5CrossAttention``, ``T5Block`` / ``T5Stack``.

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet), seed
self_attention_mask_guide.txt §7 Q1, seed masked_fill_inplace.txt (作用).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

IDENTS = ["x", "y", "n", "i", "total", "items", "value", "result", "count", "data"]
FUNCS = ["add", "scale", "merge", "norm", "clip", "pick"]
BODIES = ["return {a} + {b}", "return {a} * len ( {b} )", "for i in {b} : {a} = {a} + i return {a}"]


@dataclass
class T5Config:
    d_model: int = 64
    d_kv: int = 16
    num_heads: int = 4
    num_layers: int = 2
    num_buckets: int = 16
    max_distance: int = 64
    num_sentinels: int = 8
    pad_token_id: int = 0
    eos_token_id: int = 1


class CodeTokenizer:
    def __init__(self, cfg: T5Config):
        words = sorted(set(IDENTS + FUNCS + "def ( ) , : return + * = for in len".split()))
        specials = ["<pad>", "</s>", *(f"<extra_id_{i}>" for i in range(cfg.num_sentinels))]
        self.vocab = {w: i for i, w in enumerate(specials + words)}
        self.sentinel_ids = [self.vocab[f"<extra_id_{i}>"] for i in range(cfg.num_sentinels)]

    def pad(self, sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        width = max(len(s) for s in sequences)
        input_ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
        return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


def random_spans_noise_mask(length: int, rng: random.Random, noise_density=0.15) -> list[bool]:
    num_noise_tokens = min(max(round(length * noise_density), 1), length - 1)
    start = rng.randrange(length - num_noise_tokens + 1)
    return [start <= i < start + num_noise_tokens for i in range(length)]


def corrupt_spans(tokens: list[int], rng: random.Random, tokenizer: CodeTokenizer, eos: int):
    inputs, labels, span, prev = [], [], 0, False
    for tok, noise in zip(tokens, random_spans_noise_mask(len(tokens), rng)):
        if noise and not prev:
            inputs.append(tokenizer.sentinel_ids[span])
            labels.append(tokenizer.sentinel_ids[span])
            span += 1
        (labels if noise else inputs).append(tok)
        prev = noise
    return inputs + [eos], labels + [eos]


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(hidden_size)), eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).long() * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    scale = (num_buckets - max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (torch.log(relative_position.float() / max_exact) * scale).long()
    large = large.clamp(max=num_buckets - 1)
    return relative_buckets + torch.where(is_small, relative_position, large)


class T5Attention(nn.Module):
    def __init__(self, config: T5Config, is_decoder: bool, has_relative_attention_bias=False):
        super().__init__()
        self.config, self.is_decoder, self.n_heads = config, is_decoder, config.num_heads
        inner = config.num_heads * config.d_kv
        self.q = nn.Linear(config.d_model, inner, bias=False)
        self.k = nn.Linear(config.d_model, inner, bias=False)
        self.v = nn.Linear(config.d_model, inner, bias=False)
        self.o = nn.Linear(inner, config.d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(config.num_buckets, config.num_heads)

    def project(self, hidden_states: torch.Tensor, key_value_states: torch.Tensor):
        def shape(x: torch.Tensor) -> torch.Tensor:
            return x.view(x.shape[0], -1, self.n_heads, self.config.d_kv).transpose(1, 2)

        q = shape(self.q(hidden_states))
        return q, shape(self.k(key_value_states)), shape(self.v(key_value_states))

    def compute_bias(self, query_length: int, key_length: int) -> torch.Tensor:
        rel_pos = torch.arange(key_length)[None, :] - torch.arange(query_length)[:, None]
        c, bidirectional = self.config, not self.is_decoder
        buckets = relative_position_bucket(rel_pos, bidirectional, c.num_buckets, c.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)

    def forward(self, hidden_states, mask=None, position_bias=None):
        B, T, _ = hidden_states.shape
        q, k, v = self.project(hidden_states, hidden_states)
        if position_bias is None:
            position_bias = self.compute_bias(T, T)
            if mask is not None:
                position_bias = position_bias + mask
        scores = q @ k.transpose(-1, -2) + position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o((attn_weights @ v).transpose(1, 2).reshape(B, T, -1)), position_bias


class T5CrossAttention(T5Attention):
    def forward(self, hidden_states, key_value_states=None, encoder_attention_mask=None):
        B, T, _ = hidden_states.shape
        q, k, v = self.project(hidden_states, key_value_states)
        scores = q @ k.transpose(-1, -2)
        scores = scores.masked_fill(encoder_attention_mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o((attn_weights @ v).transpose(1, 2).reshape(B, T, -1))


class T5Block(nn.Module):
    def __init__(self, config: T5Config, is_decoder: bool, has_relative_attention_bias: bool):
        super().__init__()
        self.self_attention = T5Attention(config, is_decoder, has_relative_attention_bias)
        self.cross_attention = T5CrossAttention(config, is_decoder) if is_decoder else None
        self.ln_self, self.ln_cross = T5LayerNorm(config.d_model), T5LayerNorm(config.d_model)
        self.ln_ff = T5LayerNorm(config.d_model)
        self.wi = nn.Linear(config.d_model, 4 * config.d_model, bias=False)
        self.wo = nn.Linear(4 * config.d_model, config.d_model, bias=False)

    def forward(self, hidden_states, mask, position_bias, encoder_states=None, encoder_mask=None):
        attn, position_bias = self.self_attention(self.ln_self(hidden_states), mask, position_bias)
        hidden_states = hidden_states + attn
        if self.cross_attention is not None:
            cross = self.cross_attention(self.ln_cross(hidden_states), encoder_states, encoder_mask)
            hidden_states = hidden_states + cross
        return hidden_states + self.wo(F.relu(self.wi(self.ln_ff(hidden_states)))), position_bias


class T5Stack(nn.Module):
    def __init__(self, config: T5Config, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.embed_tokens, self.is_decoder = embed_tokens, is_decoder
        self.block = nn.ModuleList(
            T5Block(config, is_decoder, i == 0) for i in range(config.num_layers)
        )
        self.final_layer_norm = T5LayerNorm(config.d_model)

    def get_extended_attention_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype):
        extended = attention_mask[:, None, None, :].bool()
        if self.is_decoder:
            T = attention_mask.shape[1]
            extended = extended & torch.ones(T, T, dtype=torch.bool).tril()
        additive = torch.zeros(extended.shape, dtype=dtype)
        return additive.masked_fill(~extended, torch.finfo(dtype).min)

    def forward(self, input_ids, attention_mask, encoder_states=None, encoder_mask=None):
        hidden = self.embed_tokens(input_ids)
        extended = self.get_extended_attention_mask(attention_mask, hidden.dtype)
        position_bias = None
        for layer in self.block:
            hidden, position_bias = layer(
                hidden, extended, position_bias, encoder_states, encoder_mask
            )
        return self.final_layer_norm(hidden)


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, config: T5Config, vocab_size: int):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared, is_decoder=False)
        self.decoder = T5Stack(config, self.shared, is_decoder=True)
        self.lm_head = nn.Linear(config.d_model, vocab_size, bias=False)

    def _shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        shifted = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], dim=1)
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def forward(self, input_ids, attention_mask, labels):
        encoder_outputs = self.encoder(input_ids, attention_mask)
        decoder_input_ids = self._shift_right(labels)
        decoder_mask = torch.ones_like(decoder_input_ids)
        hidden = self.decoder(decoder_input_ids, decoder_mask, encoder_outputs, attention_mask)
        logits = self.lm_head(hidden * self.config.d_model**-0.5)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return loss, logits


def code_snippet(rng: random.Random) -> str:
    f, a, b = rng.choice(FUNCS), *rng.sample(IDENTS, 2)
    return f"def {f} ( {a} , {b} ) : " + rng.choice(BODIES).format(a=a, b=b)


def make_batch(rng: random.Random, tokenizer: CodeTokenizer, cfg: T5Config, n: int):
    snippets = [[tokenizer.vocab[w] for w in code_snippet(rng).split()] for _ in range(n)]
    pairs = [corrupt_spans(s, rng, tokenizer, cfg.eos_token_id) for s in snippets]
    enc = tokenizer.pad([p for p, _ in pairs])
    labels = tokenizer.pad([t for _, t in pairs])["input_ids"]
    return {**enc, "labels": labels.masked_fill(labels == cfg.pad_token_id, -100)}


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), T5Config()
    tokenizer = CodeTokenizer(cfg)
    model = T5ForConditionalGeneration(cfg, len(tokenizer.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(300):
        loss, _ = model(**make_batch(rng, tokenizer, cfg, 32))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    batch = make_batch(rng, tokenizer, cfg, 128)
    with torch.no_grad():
        _, logits = model(**batch)
        n, i = (int(t) for t in batch["attention_mask"].sum(1).min(dim=0))
        single = {k: v[i : i + 1, :n] for k, v in batch.items() if k != "labels"}
        _, alone = model(**single, labels=batch["labels"][i : i + 1])
    correct = (logits.argmax(-1) == batch["labels"])[batch["labels"] != -100]
    print(f"span token accuracy {correct.float().mean().item():.3f}")
    print(f"shortest source alone vs padded: {(alone[0] - logits[i]).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
