"""Held-out 11 (correct twin): nanochat's GPT (nanochat/gpt.py: `CausalSelfAttention` with rotary embeddings, QK norm,
MQA `repeat_kv` and the three-case attention over a KV cache; `Block`; `GPT`) and an engine-style
`KVCache` with `insert_kv`.

Source: nanochat's gpt.py as karpathy/nanochat PR #456 keeps it: `is_causal=False` for the single
query of a decode step, which attends to every cached key.
Surroundings: keys and values returned by the cache's `insert_kv`, the flag chosen by branch on the
query and key lengths.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def norm(x):
    return F.rms_norm(x, (x.size(-1),))


def apply_rotary_emb(x, cos, sin):
    d = x.shape[3] // 2
    x1, x2 = x[..., :d], x[..., d:]
    y1 = x1 * cos + x2 * sin
    y2 = x1 * (-sin) + x2 * cos
    return torch.cat([y1, y2], 3).to(x.dtype)


class KVCache:
    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers

    def insert_kv(self, layer_idx, k, v):
        if self.k[layer_idx] is not None:
            k = torch.cat([self.k[layer_idx], k], dim=2)
            v = torch.cat([self.v[layer_idx], v], dim=2)
        self.k[layer_idx], self.v[layer_idx] = k, v
        return k, v

    def get_pos(self):
        return 0 if self.k[0] is None else self.k[0].size(2)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_head = n_head
        self.head_dim = n_embd // n_head
        self.c_q = nn.Linear(n_embd, n_embd, bias=False)
        self.c_k = nn.Linear(n_embd, n_embd, bias=False)
        self.c_v = nn.Linear(n_embd, n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x, cos_sin, kv_cache):
        B, T, C = x.size()
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_head, self.head_dim)
        v = self.c_v(x).view(B, T, self.n_head, self.head_dim)
        cos, sin = cos_sin
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k = norm(q), norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if kv_cache is not None:
            k, v = kv_cache.insert_kv(self.layer_idx, k, v)
        Tq = q.size(2)
        Tk = k.size(2)
        if kv_cache is None or Tq == Tk:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif Tq == 1:
            # During inference but with a single query in this forward pass
            y = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        else:
            attn_mask = torch.zeros((Tq, Tk), dtype=torch.bool, device=q.device)  # True = keep
            prefix_len = Tk - Tq
            if prefix_len > 0:
                attn_mask[:, :prefix_len] = True
            attn_mask[:, prefix_len:] = torch.tril(torch.ones((Tq, Tq), dtype=torch.bool, device=q.device))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        y = y.transpose(1, 2).contiguous().view(B, T, -1)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, layer_idx):
        super().__init__()
        self.attn = CausalSelfAttention(n_embd, n_head, layer_idx)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=False)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=False)

    def forward(self, x, cos_sin, kv_cache):
        x = x + self.attn(norm(x), cos_sin, kv_cache)
        return x + self.c_proj(F.relu(self.c_fc(norm(x))).square())


class GPT(nn.Module):
    def __init__(self, vocab_size=64, n_layer=2, n_head=4, n_embd=64, sequence_len=32):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, i) for i in range(n_layer)])
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        head_dim = n_embd // n_head
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(sequence_len * 10, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", freqs.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", freqs.sin()[None, :, None, :], persistent=False)

    def forward(self, idx, kv_cache=None):
        B, T = idx.size()
        T0 = 0 if kv_cache is None else kv_cache.get_pos()
        cos_sin = self.cos[:, T0:T0 + T], self.sin[:, T0:T0 + T]
        x = norm(self.wte(idx))
        for block in self.h:
            x = block(x, cos_sin, kv_cache)
        return self.lm_head(norm(x))
