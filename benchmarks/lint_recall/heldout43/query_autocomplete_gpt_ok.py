"""Query auto-completion with a character-level GPT over a search log.

Follows the neural QAC line of work (Wang et al., "Realtime query completion via deep language
models"), on a nanoGPT-style decoder: a character vocabulary with BOS / EOS / PAD, right-padded
training batches of logged queries sampled by frequency, batched greedy completion of left-padded
prefixes, and re-ranking of the most-popular-completion (MPC) candidates by log-probability, scored
with the math kernel so that rankings are reproducible across serving hosts. Reports MRR.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, pytorch/pytorch PR #111007 (conventions.md §1)
"""
import math
import random
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD, BOS, EOS = 0, 1, 2
BRANDS = ["nike", "adidas", "apple", "samsung", "lego", "sony", "ikea", "dyson"]
PRODUCTS = ["shoes", "watch", "phone case", "headphones", "charger", "lamp", "vacuum", "backpack"]
MODIFIERS = ["", " for kids", " black", " sale", " wireless", " 2024", " men", " waterproof"]


@dataclass
class QACConfig:
    vocab_size: int
    block_size: int = 64
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.1


class CharTokenizer:
    def __init__(self, queries):
        self.chars = sorted({c for q in queries for c in q})
        self.stoi = {c: i + 3 for i, c in enumerate(self.chars)}
        self.itos = {i: c for c, i in self.stoi.items()}

    def encode(self, text, bos=True, eos=True):
        return [BOS] * bos + [self.stoi[c] for c in text] + [EOS] * eos

    def decode(self, ids):
        return "".join(self.itos.get(i, "") for i in ids if i > EOS)

    def pad(self, seqs, side="right"):
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
        for i, s in enumerate(seqs):
            if side == "left":
                ids[i, width - len(s):] = torch.tensor(s)
            else:
                ids[i, :len(s)] = torch.tensor(s)
        return {"input_ids": ids, "attention_mask": (ids != PAD).long()}


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")
        bias = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("bias", bias.view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x, attn_mask):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        dropout_p = self.dropout if self.training else 0.0
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask & self.bias[:, :, :T, :T], dropout_p=dropout_p)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~(attn_mask & self.bias[:, :, :T, :T]), float("-inf"))
            y = F.dropout(torch.nan_to_num(F.softmax(att, dim=-1)), dropout_p) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.dropout))

    def forward(self, x, attn_mask):
        x = x + self.attn(self.ln_1(x), attn_mask)
        return x + self.mlp(self.ln_2(x))


class QACModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, input_ids, attention_mask):
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        x = self.wte(input_ids) + self.wpe(position_ids)
        attn_mask = attention_mask.bool()[:, None, None, :]
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def complete(self, tokenizer, prefixes, max_new_chars=24):
        batch = tokenizer.pad([tokenizer.encode(p, eos=False) for p in prefixes], side="left")
        ids, mask = batch["input_ids"], batch["attention_mask"]
        done = torch.zeros(len(prefixes), dtype=torch.bool)
        for _ in range(max_new_chars):
            nxt = self(ids, mask)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            done |= nxt == EOS
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            mask = torch.cat([mask, (~done | (nxt == EOS)).long()[:, None]], dim=1)
            if done.all():
                break
        return [tokenizer.decode(row.tolist()) for row in ids]


def sequence_logprob(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return (logp * batch["attention_mask"][:, 1:]).sum(-1)


@torch.no_grad()
def rerank_mpc(model, tokenizer, prefix, log_counts, top_n=8):
    candidates = [q for q, _ in log_counts.most_common() if q.startswith(prefix)][:top_n]
    with sdpa_kernel(SDPBackend.MATH):
        scores = sequence_logprob(model, tokenizer.pad([tokenizer.encode(c) for c in candidates]))
    return [candidates[i] for i in scores.argsort(descending=True).tolist()]


def synth_log(rng, n):
    queries = [b + " " + p + m for b in BRANDS for p in PRODUCTS for m in MODIFIERS]
    weights = [1.0 / (1 + r) ** 1.1 for r in range(len(queries))]
    rng.shuffle(queries)
    return rng.choices(queries, weights=weights, k=n)


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train_log, test_log = synth_log(rng, 20000), synth_log(random.Random(1), 300)
    log_counts = Counter(train_log)
    tokenizer = CharTokenizer(train_log)
    model = QACModel(QACConfig(vocab_size=len(tokenizer.chars) + 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    for step in range(400):
        model.train()
        batch = tokenizer.pad([tokenizer.encode(q) for q in rng.sample(train_log, 64)])
        logits = model(batch["input_ids"], batch["attention_mask"])
        targets = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    prefixes = [q[: rng.randint(2, len(q) - 1)] for q in test_log]
    completions = model.complete(tokenizer, prefixes)
    print("greedy exact", sum(c == q for c, q in zip(completions, test_log)) / len(test_log))
    rr = []
    for prefix, target in zip(prefixes[:100], test_log[:100]):
        ranked = rerank_mpc(model, tokenizer, prefix, log_counts)
        rr.append(1.0 / (ranked.index(target) + 1) if target in ranked else 0.0)
    print(f"MRR@8 of re-ranked MPC candidates {sum(rr) / len(rr):.3f}")


if __name__ == "__main__":
    main()
