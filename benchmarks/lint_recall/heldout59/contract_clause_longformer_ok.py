"""Contract clause classification over long legal documents (CUAD-style labels).

A Longformer-style encoder: every token attends to a sliding window of neighbours, and the
[CLS] token attends globally to the whole contract. On the GPU the local layers use
FlashAttention varlen with window_size on the unpadded tokens; elsewhere SDPA with dense masks.
Clause types are read out by a multi-head attention pool over the token states.

Source: seed self_attention_mask_guide.txt §2 (key_padding_mask) and §7 Q1; conventions.md §1 (direction cheat-sheet, HF attention_mask row), §5 item 1
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None

CLAUSE_TYPES = ["governing_law", "termination", "non_compete", "liability_cap", "assignment", "audit_rights"]


def encode(tokenizer, contracts, max_length=1024):
    enc = tokenizer(contracts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "pad": enc["attention_mask"] == 0}


def band(n, window, device=None):
    idx = torch.arange(n, device=device)
    return (idx[:, None] - idx[None, :]).abs() <= window


class LocalGlobalAttention(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.global_qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def split(self, t):
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def local(self, x, pad):
        b, n, d = x.shape
        q, k, v = (self.split(t) for t in self.qkv(x).chunk(3, dim=-1))
        if flash_attn_varlen_func is not None and x.is_cuda:
            keep = ~pad
            idx = keep.flatten().nonzero().flatten()
            cu = F.pad(keep.sum(-1).cumsum(0), (1, 0)).to(torch.int32)
            packed = [t.transpose(1, 2).flatten(0, 1)[idx] for t in (q, k, v)]
            y = flash_attn_varlen_func(*packed, cu, cu, n, n, window_size=(self.window, self.window))
            out = torch.zeros(b * n, self.heads, d // self.heads, device=x.device, dtype=y.dtype)
            out[idx] = y
            return out.view(b, n, d)
        allowed = band(n, self.window, x.device) & ~pad[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return y.transpose(1, 2).reshape(b, n, d)

    def forward(self, x, pad):
        b, n, d = x.shape
        y = self.local(x, pad)
        q, k, v = (self.split(t) for t in self.global_qkv(x).chunk(3, dim=-1))
        g = F.scaled_dot_product_attention(q[:, :, :1], k, v, attn_mask=~pad[:, None, None, :])
        y = torch.cat([g.transpose(1, 2).reshape(b, 1, d), y[:, 1:]], dim=1)
        return self.out(y)


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.attn = LocalGlobalAttention(dim, heads, window)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, pad):
        x = self.norm1(x + self.attn(x, pad))
        return self.norm2(x + self.ffn(x))


class ClauseClassifier(nn.Module):
    def __init__(self, vocab=1000, dim=64, heads=4, depth=2, window=8, max_len=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, window) for _ in range(depth))
        self.clause_queries = nn.Parameter(torch.randn(len(CLAUSE_TYPES), dim) * 0.02)
        self.pool = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.clause_head = nn.Linear(dim, 1)

    def forward(self, input_ids, pad):
        n = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos(torch.arange(n, device=input_ids.device))
        for layer in self.layers:
            x = layer(x, pad)
        queries = self.clause_queries.expand(x.shape[0], -1, -1)
        pooled, _ = self.pool(queries, x, x, key_padding_mask=pad, need_weights=False)
        return self.clause_head(pooled + x[:, :1]).squeeze(-1)


def train(model, tokenizer, contracts, labels, epochs=5, lr=1e-3, batch_size=4):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(contracts)).tolist()
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            batch = encode(tokenizer, [contracts[j] for j in idx])
            logits = model(batch["input_ids"], batch["pad"])
            loss = F.binary_cross_entropy_with_logits(logits, labels[idx].float())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return loss.item()


@torch.no_grad()
def predict(model, tokenizer, contracts, threshold=0.5):
    batch = encode(tokenizer, contracts)
    probs = torch.sigmoid(model(batch["input_ids"], batch["pad"]))
    return {name: probs[:, i] > threshold for i, name in enumerate(CLAUSE_TYPES)}


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--max-length", type=int, default=1024)
    return p.parse_args(argv)
