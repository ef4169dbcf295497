"""CEHR-GPT style generative model of patient timelines from OMOP-like visit records.

A patient becomes a demographic prompt (``year:``, ``age:``, ``gender:``, ``race:``) followed by
visit blocks ``[VS] VT:<visit type> <concepts> [VE]`` separated by artificial time tokens (``D1``
to ``D6``, ``W0`` to ``W3``, ``M0`` to ``M11``, ``LT``), as in cumc-dbmi/cehrgpt. The network is a
nanoGPT-style decoder (``CausalSelfAttention`` with a flash path and a slow path, ``MLP``,
``Block``) trained on right-padded batches from ``collate_fn`` and evaluated by held-out
perplexity; ``generate_patient`` samples a synthetic timeline from a prompt.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, pytorch/pytorch PR #111007
(conventions.md §1)
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa

CONDITIONS = {
    "ICD10:E11.9": ["RxNorm:860975", "LOINC:4548-4", "RxNorm:253182"],
    "ICD10:I10": ["RxNorm:314076", "LOINC:8480-6", "RxNorm:197361"],
    "ICD10:J45.909": ["RxNorm:745679", "LOINC:19926-5", "RxNorm:2123111"],
    "ICD10:N18.3": ["LOINC:2160-0", "LOINC:33914-3", "RxNorm:29046"],
}
SPECIAL = ["[PAD]", "[START]", "[END]", "[VS]", "[VE]", "LT"]
VISIT_TYPES = ["VT:outpatient", "VT:inpatient", "VT:emergency"]
TIME_TOKENS = (
    [f"D{i}" for i in range(1, 7)] + [f"W{i}" for i in range(4)] + [f"M{i}" for i in range(12)]
)


@dataclass
class CEHRGPTConfig:
    vocab_size: int = 0
    n_positions: int = 96
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 2
    dropout: float = 0.0


def build_vocab():
    demographics = [f"year:{y}" for y in range(2010, 2020)] + [f"age:{a}" for a in range(20, 90, 5)]
    demographics += ["gender:F", "gender:M", "race:white", "race:black", "race:asian"]
    concepts = [c for k, v in CONDITIONS.items() for c in [k, *v]]
    itos = SPECIAL + demographics + VISIT_TYPES + TIME_TOKENS + concepts
    return {t: i for i, t in enumerate(itos)}, itos


def simulate_patient(rng):
    conditions = rng.sample(sorted(CONDITIONS), rng.randint(1, 2))
    tokens = ["[START]", f"year:{rng.randint(2010, 2019)}", f"age:{rng.randrange(20, 90, 5)}"]
    tokens += [
        rng.choice(["gender:F", "gender:M"]),
        rng.choice(["race:white", "race:black", "race:asian"]),
    ]
    for v in range(rng.randint(1, 6)):
        if v > 0:
            tokens.append(rng.choice(TIME_TOKENS[6:]))
        tokens += ["[VS]", rng.choices(VISIT_TYPES, weights=[8, 1, 1])[0]]
        for c in conditions:
            tokens += [c] + CONDITIONS[c][: 1 + min(v, 2)]
        tokens.append("[VE]")
    return tokens + ["[END]"]


def collate_fn(sequences, stoi, max_len):
    ids = [[stoi[t] for t in seq][:max_len] for seq in sequences]
    length = max(len(s) for s in ids)
    input_ids = torch.zeros(len(ids), length, dtype=torch.long)
    attention_mask = torch.zeros(len(ids), length, dtype=torch.long)
    for i, s in enumerate(ids):
        input_ids[i, : len(s)] = torch.tensor(s)
        attention_mask[i, : len(s)] = 1
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: CEHRGPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        n = config.n_positions
        self.register_buffer("bias", torch.ones(n, n, dtype=torch.bool).tril().view(1, 1, n, n))

    def forward(self, x, attention_mask):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = sdpa(q, k, v, attn_mask=attention_mask & self.bias[:, :, :T, :T], dropout_p=self.dropout if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~(self.bias[:, :, :T, :T] & attention_mask), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, attention_mask):
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.mlp(self.ln_2(x))


class CEHRGPT2LMHeadModel(nn.Module):
    def __init__(self, config: CEHRGPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, attention_mask=None, labels=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)[None]
        attn_mask = attention_mask.bool()[:, None, None, :]
        for block in self.h:
            x = block(x, attn_mask)
        logits = self.lm_head(self.ln_f(x))
        if labels is None:
            return logits, None
        loss = F.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
        )
        return logits, loss


@torch.no_grad()
def generate_patient(model, prompt_ids, itos, max_new_tokens=40, temperature=0.8):
    ids = prompt_ids
    for _ in range(max_new_tokens):
        logits, _ = model(ids[:, -model.config.n_positions :])
        probs = F.softmax(logits[:, -1] / temperature, dim=-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
        if itos[ids[0, -1]] == "[END]":
            break
    return [itos[i] for i in ids[0].tolist()]


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    stoi, itos = build_vocab()
    config = CEHRGPTConfig(vocab_size=len(itos))
    train = [simulate_patient(rng) for _ in range(768)]
    held_out = collate_fn([simulate_patient(rng) for _ in range(128)], stoi, config.n_positions)
    model = CEHRGPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    for epoch in range(4):
        rng.shuffle(train)
        for start in range(0, len(train), 32):
            batch = collate_fn(train[start : start + 32], stoi, config.n_positions)
            _, loss = model(**batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        _, loss = model(**held_out)
    print(f"held-out perplexity {math.exp(loss.item()):.3f}")
    prompt = torch.tensor(
        [[stoi[t] for t in ["[START]", "year:2015", "age:60", "gender:F", "race:white"]]]
    )
    print(" ".join(generate_patient(model, prompt, itos)))
