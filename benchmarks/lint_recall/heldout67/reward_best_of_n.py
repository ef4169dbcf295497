"""Best-of-N sampling: a small policy LM samples N continuations per prompt,
a reward model scores every (prompt, continuation) pair and the best one is
returned.  Prompts are left-padded so the policy can decode them as a batch
with a key/value cache; the reward model reads the whole sequence and pools
it with a learned query.

Source: conventions.md section 1 (direction cheat-sheet: nn.MultiheadAttention key_padding_mask, Hugging Face attention_mask); seed self_attention_mask_guide.txt sections 2 and 7 (Q1).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


@dataclass
class LMConfig:
    vocab_size: int = 96
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 64


def encode(text):
    return [BOS] + [3 + (ord(ch) % 93) for ch in text]


def decode(ids):
    return "".join(chr(32 + (i - 3) % 93) for i in ids if i > EOS)


def left_pad(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, width - len(s):] = torch.tensor(s)
    return ids, ids != PAD


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, keep, past=None):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, -1).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        x = x + self.mlp(self.ln2(x))
        return x, (k, v)


class PolicyLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, ids, attention_mask, position_ids, past=None):
        t, s = ids.size(1), attention_mask.size(1)
        causal = torch.ones(t, s, dtype=torch.bool, device=ids.device).tril(s - t)
        keep = causal[None, None] & attention_mask[:, None, None, :]
        x = self.tok(ids) + self.pos(position_ids)
        presents = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, keep, None if past is None else past[i])
            presents.append(kv)
        return self.head(self.ln_f(x)), presents


class RewardModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=PAD)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.query = nn.Parameter(torch.randn(1, 1, cfg.dim) / math.sqrt(cfg.dim))
        self.pool = nn.MultiheadAttention(cfg.dim, cfg.n_heads, batch_first=True)
        self.score = nn.Linear(cfg.dim, 1)

    def forward(self, input_ids, attention_mask):
        b, n = input_ids.shape
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        x = self.tok(input_ids) + self.pos(position_ids)
        keep = attention_mask[:, None, None, :].expand(b, 1, n, n)
        for block in self.blocks:
            x, _ = block(x, keep)
        pooled, _ = self.pool(self.query.expand(b, -1, -1), x, x, key_padding_mask=attention_mask)  # expect: MC502 pooling
        return self.score(pooled[:, 0]).squeeze(-1)


@torch.no_grad()
def sample(policy, ids, attention_mask, n_samples, max_new_tokens=12, temperature=0.8, generator=None):
    ids = ids.repeat_interleave(n_samples, dim=0)
    attention_mask = attention_mask.repeat_interleave(n_samples, dim=0)
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits, past = policy(ids, attention_mask, position_ids)
    done = torch.zeros(ids.size(0), dtype=torch.bool)
    new_tokens = []
    for _ in range(max_new_tokens):
        probs = F.softmax(logits[:, -1] / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        nxt = nxt.masked_fill(done, PAD)
        new_tokens.append(nxt)
        done = done | (nxt == EOS)
        attention_mask = torch.cat([attention_mask, (nxt != PAD)[:, None]], dim=1)
        position_ids = position_ids[:, -1:] + 1
        logits, past = policy(nxt[:, None], attention_mask, position_ids, past)
        if bool(done.all()):
            break
    return ids, torch.stack(new_tokens, dim=1)


def join(prompt_ids, completions):
    seqs = torch.cat([prompt_ids, completions], dim=1)
    return {"input_ids": seqs, "attention_mask": seqs != PAD}


@torch.no_grad()
def best_of_n(policy, reward_model, ids, attention_mask, n=4, generator=None):
    prompt_ids, completions = sample(policy, ids, attention_mask, n, generator=generator)
    batch = join(prompt_ids, completions)
    rewards = reward_model(**batch).view(ids.size(0), n)
    best = rewards.argmax(dim=-1)
    picked = completions.view(ids.size(0), n, -1)[torch.arange(ids.size(0)), best]
    return picked, rewards


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = LMConfig()
    policy, reward_model = PolicyLM(cfg).eval(), RewardModel(cfg).eval()
    prompts = ["Summarise: the cat sat on the mat.", "Q: what is 2+2?", "Write a haiku"]
    ids, attention_mask = left_pad([encode(p) for p in prompts])
    gen = torch.Generator().manual_seed(0)
    picked, rewards = best_of_n(policy, reward_model, ids, attention_mask, n=4, generator=gen)
    print("rewards", rewards)
    for prompt, row in zip(prompts, picked.tolist()):
        print(repr(prompt), "->", repr(decode(row)))
