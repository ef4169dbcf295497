"""Speculative sampling with a draft and a target model (Leviathan et al.,
2023; Chen et al., 2023).

The draft proposes `gamma` tokens one at a time, the target scores all of
them in a single forward pass over its key/value cache, and the longest
prefix the target agrees with is kept, plus one token from the target.  With
temperature 0 the output must equal the target's own greedy decoding.

Source: conventions.md section 1 (SDPA is_causal row), sections 2.7 and 5 (item 8); pytorch/pytorch PR #111007.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 256


class KVCache:
    def __init__(self, n_layer):
        self.k, self.v = [None] * n_layer, [None] * n_layer

    def update(self, layer, k, v):
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def __len__(self):
        return 0 if self.k[0] is None else self.k[0].size(2)

    def crop(self, n):
        self.k = [t[:, :, :n] for t in self.k]
        self.v = [t[:, :, :n] for t in self.v]


class Attention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx, self.n_head = layer_idx, cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x, cache):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        k, v = cache.update(self.layer_idx, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - T))
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.ln1 = nn.ModuleList(nn.LayerNorm(cfg.n_embd) for _ in range(cfg.n_layer))
        self.attn = nn.ModuleList(Attention(cfg, i) for i in range(cfg.n_layer))
        self.ln2 = nn.ModuleList(nn.LayerNorm(cfg.n_embd) for _ in range(cfg.n_layer))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))
            for _ in range(cfg.n_layer)
        )
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx, cache):
        start = len(cache)
        pos = torch.arange(start, start + idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for ln1, attn, ln2, mlp in zip(self.ln1, self.attn, self.ln2, self.mlp):
            x = x + attn(ln1(x), cache)
            x = x + mlp(ln2(x))
        return self.lm_head(self.ln_f(x))


def norm_probs(logits, temperature):
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.size(-1)).float()
    return F.softmax(logits / temperature, dim=-1)


def sample(p, generator=None):
    return torch.multinomial(p, 1, generator=generator)


@torch.no_grad()
def greedy_generate(model, prompt, max_new_tokens):
    cache = KVCache(model.cfg.n_layer)
    logits = model(prompt, cache)
    tokens = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1:].argmax(-1)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = model(nxt, cache)
    return tokens


@torch.no_grad()
def speculative_generate(target, draft, prompt, max_new_tokens, gamma=4, temperature=0.0, generator=None):
    t_cache, d_cache = KVCache(target.cfg.n_layer), KVCache(draft.cfg.n_layer)
    target(prompt[:, :-1], t_cache)
    draft(prompt[:, :-1], d_cache)
    tokens, n_accepted, n_drafted = prompt, 0, 0
    while tokens.size(1) - prompt.size(1) < max_new_tokens:
        n = tokens.size(1)
        x, proposals, q = tokens[:, -1:], [], []
        for _ in range(gamma):
            q_i = norm_probs(draft(x, d_cache)[:, -1], temperature)
            x = sample(q_i, generator)
            proposals.append(x)
            q.append(q_i)
        proposals = torch.cat(proposals, dim=1)
        p = norm_probs(target(torch.cat([tokens[:, -1:], proposals], dim=1), t_cache)[0], temperature)
        accepted = 0
        for i in range(gamma):
            tok = proposals[0, i]
            r = torch.rand((), generator=generator)
            if r < torch.clamp(p[i, tok] / q[i][0, tok], max=1.0):
                accepted += 1
                continue
            residual = torch.clamp(p[i] - q[i][0], min=0)
            nxt = sample((residual / residual.sum())[None], generator)
            break
        else:
            nxt = sample(p[gamma][None], generator)
        n_accepted, n_drafted = n_accepted + accepted, n_drafted + gamma
        tokens = torch.cat([tokens, proposals[:, :accepted], nxt], dim=1)
        t_cache.crop(n + accepted)
        if len(d_cache) < n + accepted:
            draft(proposals[:, -1:], d_cache)
        d_cache.crop(n + accepted)
    return tokens[:, : prompt.size(1) + max_new_tokens], n_accepted / max(n_drafted, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    target = GPT(GPTConfig(n_layer=4, n_embd=96)).eval()
    draft = GPT(GPTConfig(n_layer=1, n_embd=32)).eval()
    prompt = torch.randint(0, 128, (1, 8))
    ref = greedy_generate(target, prompt, 16)
    out, rate = speculative_generate(target, draft, prompt, 16, gamma=4)
    print("greedy     ", ref[0, 8:].tolist())
    print("speculative", out[0, 8:].tolist(), "acceptance", round(rate, 3))
    print("same as greedy:", torch.equal(ref, out))
    gen = torch.Generator().manual_seed(0)
    sampled, rate = speculative_generate(target, draft, prompt, 16, temperature=0.8, generator=gen)
    print("sampled    ", sampled[0, 8:].tolist(), "acceptance", round(rate, 3))
