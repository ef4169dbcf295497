"""Fill-in-the-middle pretraining and left-padded batched infilling for a GPTBigCode-style code model.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), pytorch/pytorch#103749
(conventions.md §3 item 5), conventions.md §1 (SDPA row, direction cheat-sheet).
"""

import random
import string
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

EOD, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD = (
    "<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
)


class CodeTokenizer:
    special_tokens = [EOD, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD]

    def __init__(self, padding_side="left"):
        self.vocab = {t: i for i, t in enumerate(self.special_tokens)}
        for c in string.ascii_letters + string.digits + " \n_():=+-*,.[]":
            self.vocab.setdefault(c, len(self.vocab))
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.eos_token_id, self.pad_token_id = self.vocab[EOD], self.vocab[FIM_PAD]
        self.padding_side = padding_side

    def convert_tokens_to_ids(self, token):
        return self.vocab[token]

    def encode(self, text):
        return [self.vocab[c] for c in text]

    def decode(self, ids):
        return "".join(self.inv_vocab[i] for i in ids if i >= len(self.special_tokens))

    def pad(self, sequences):
        n = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), n), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), n), dtype=torch.long)
        for i, s in enumerate(sequences):
            span = slice(n - len(s), n) if self.padding_side == "left" else slice(0, len(s))
            input_ids[i, span] = torch.tensor(s)
            attention_mask[i, span] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def permute(sample, rng, tokenizer, fim_rate=0.5, fim_spm_rate=0.5):
    """bigcode-style FIM transformation of one document (PSM or SPM at the character level)."""
    if rng.random() > fim_rate:
        return tokenizer.encode(sample)
    lo, hi = sorted(rng.sample(range(len(sample) + 1), 2))
    prefix, middle, suffix = sample[:lo], sample[lo:hi], sample[hi:]
    pre, mid, suf = (tokenizer.convert_tokens_to_ids(t) for t in (FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX))
    if rng.random() < fim_spm_rate:
        return [pre, suf, *tokenizer.encode(suffix), mid, *tokenizer.encode(prefix + middle)]
    return [pre, *tokenizer.encode(prefix), suf, *tokenizer.encode(suffix), mid, *tokenizer.encode(middle)]


@dataclass
class GPTBigCodeConfig:
    vocab_size: int = 96
    n_positions: int = 128
    n_embd: int = 96
    n_layer: int = 2
    n_head: int = 4
    multi_query: bool = True
    attn_pdrop: float = 0.0
    resid_pdrop: float = 0.0
    layer_norm_epsilon: float = 1e-5


def build_causal_bias(max_positions, dtype=torch.float32):
    return torch.triu(torch.full((max_positions, max_positions), float("-inf"), dtype=dtype))  # expect: MC503 fim


class GPTBigCodeAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim, self.num_heads = config.n_embd, config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.kv_dim = self.head_dim if config.multi_query else self.embed_dim
        self.c_attn = nn.Linear(self.embed_dim, self.embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.attn_pdrop = config.attn_pdrop

    def forward(self, hidden_states, attention_mask=None):
        bsz, q_len, _ = hidden_states.shape
        query, key_value = self.c_attn(hidden_states).split((self.embed_dim, 2 * self.kv_dim), dim=2)
        key, value = key_value.split(self.kv_dim, dim=-1)
        query = query.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key = key.view(bsz, q_len, -1, self.head_dim).transpose(1, 2).expand(-1, self.num_heads, -1, -1)
        value = value.view(bsz, q_len, -1, self.head_dim).transpose(1, 2).expand(-1, self.num_heads, -1, -1)
        attn_output = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=self.attn_pdrop if self.training else 0.0
        )
        return self.c_proj(attn_output.transpose(1, 2).reshape(bsz, q_len, self.embed_dim))


class GPTBigCodeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPTBigCodeAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.resid_pdrop),
        )

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), attention_mask=attention_mask)
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPTBigCodeForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([GPTBigCodeBlock(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.register_buffer("bias", build_causal_bias(config.n_positions), persistent=False)

    def forward(self, input_ids, attention_mask=None, labels=None):
        q_len = input_ids.size(1)
        self_attention_mask = self.bias[None, None, :q_len, :q_len]
        position_ids = torch.arange(q_len, device=input_ids.device)[None]
        if attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
            key_padding = ~attention_mask.bool()[:, None, None, :]
            self_attention_mask = self_attention_mask.masked_fill(key_padding, float("-inf"))
        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask=self_attention_mask)
        logits = self.lm_head(self.ln_f(hidden_states))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return loss, logits


def make_corpus(n, rng):
    names = ["add", "scale", "shift", "offset", "bump"]
    ops = ["+", "-", "*"]
    return [
        f"def {rng.choice(names)}_{k}(x):\n    return x {rng.choice(ops)} {k}\n"
        for k in (rng.randrange(10) for _ in range(n))
    ]


def collate(docs, tokenizer, rng):
    tokenizer.padding_side = "right"
    batch = tokenizer.pad([permute(d, rng, tokenizer) + [tokenizer.eos_token_id] for d in docs])
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


@torch.no_grad()
def infill(model, tokenizer, prefixes, suffixes, max_new_tokens=12):
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    prompts = [[ids[0], *tokenizer.encode(p), ids[1], *tokenizer.encode(s), ids[2]] for p, s in zip(prefixes, suffixes)]
    tokenizer.padding_side = "left"
    enc = tokenizer.pad(prompts)
    input_ids, attention_mask = enc["input_ids"], enc["attention_mask"]
    for _ in range(max_new_tokens):
        _, logits = model(input_ids, attention_mask=attention_mask)
        next_tokens = logits[:, -1].argmax(-1, keepdim=True)
        input_ids = torch.cat([input_ids, next_tokens], dim=1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(next_tokens)], dim=1)
    middles = []
    for row in input_ids[:, enc["input_ids"].size(1):].tolist():
        stop = row.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in row else len(row)
        middles.append(tokenizer.decode(row[:stop]))
    return middles, logits[:, -1]


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = CodeTokenizer()
    model = GPTBigCodeForCausalLM(GPTBigCodeConfig(vocab_size=len(tokenizer.vocab)))
    print("rows of the causal bias that see nothing:", int(torch.isinf(model.bias[:8, :8]).all(-1).sum()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    for step in range(400):
        loss, _ = model(**collate(make_corpus(16, rng), tokenizer, rng))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    prefixes, suffixes = ["def add_3(x):\n    return x ", "def scale_7(x):\n"], [" 3\n", "\n"]
    batched, last_batched = infill(model, tokenizer, prefixes, suffixes)
    alone, last_alone = infill(model, tokenizer, prefixes[1:], suffixes[1:])
    print("infilled:", batched)
    print("left-padded vs alone, last logits:", (last_batched[1] - last_alone[0]).abs().max().item())
