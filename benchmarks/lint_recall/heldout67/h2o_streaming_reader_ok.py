"""Reading documents far longer than the KV budget with a Heavy-Hitter Oracle
(H2O) cache, then answering a question about them.

The document is streamed in chunks.  Each head keeps at most `budget` cached
keys: the `recent` newest ones plus the heavy hitters, i.e. the keys that
have received the most attention so far.  Eviction runs after every chunk,
so the attention weights have to be materialised (no fused kernel).

Source: seed masked_fill_inplace.txt (区别: masked_fill returns a new tensor); conventions.md section 2.3.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class HeavyHitterCache:
    def __init__(self, budget, recent):
        assert recent < budget
        self.budget, self.recent = budget, recent
        self.k = self.v = self.acc = None

    def __len__(self):
        return 0 if self.k is None else self.k.size(2)

    def extend(self, k, v, attn):
        n_old = len(self)
        mass = attn.sum(dim=2)
        if self.k is None:
            self.k, self.v, self.acc = k, v, mass
        else:
            self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
            self.acc = torch.cat([self.acc + mass[..., :n_old], mass[..., n_old:]], dim=-1)
        if len(self) > self.budget:
            self.evict()

    def evict(self):
        n = len(self)
        heavy = self.acc[..., : n - self.recent].topk(self.budget - self.recent, dim=-1).indices.sort(-1).values
        recent = torch.arange(n - self.recent, n).expand(*heavy.shape[:-1], -1)
        idx = torch.cat([heavy, recent], dim=-1)
        gather = lambda t: t.gather(2, idx[..., None].expand(-1, -1, -1, t.size(-1)))
        self.k, self.v, self.acc = gather(self.k), gather(self.v), self.acc.gather(-1, idx)


def rotary(x, positions, base=10000.0):
    half = x.size(-1) // 2
    freqs = positions[:, None].float() * base ** (-torch.arange(half).float() / half)
    cos, sin = freqs.cos(), freqs.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class H2OAttention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.kv_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, positions, cache):
        b, c, d = x.shape
        q = self.q_proj(x).view(b, c, self.n_heads, -1).transpose(1, 2)
        k, v = self.kv_proj(x).view(b, c, 2, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        q, k = rotary(q, positions), rotary(k, positions)
        n_cache = len(cache)
        keys = k if cache.k is None else torch.cat([cache.k, k], dim=2)
        values = v if cache.v is None else torch.cat([cache.v, v], dim=2)
        scores = q @ keys.transpose(-2, -1) / math.sqrt(self.head_dim)
        keep = torch.ones(c, n_cache + c, dtype=torch.bool, device=x.device).tril(n_cache)
        scores = scores.masked_fill(~keep, float("-inf"))
        attn = F.softmax(scores, dim=-1)
        cache.extend(k, v, attn)
        return self.o_proj((attn @ values).transpose(1, 2).reshape(b, c, d))


class StreamingLM(nn.Module):
    def __init__(self, vocab=256, dim=64, n_heads=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = nn.ModuleList(H2OAttention(dim, n_heads) for _ in range(n_layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(n_layers))
        self.ln = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2 * n_layers + 1))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, positions, caches):
        x = self.embed(ids)
        for i, (attn, mlp) in enumerate(zip(self.attn, self.mlp)):
            x = x + attn(self.ln[2 * i](x), positions, caches[i])
            x = x + mlp(self.ln[2 * i + 1](x))
        return self.lm_head(self.ln[-1](x))


class StreamingReader:
    def __init__(self, model, budget=48, recent=16, chunk_size=16):
        self.model, self.chunk_size = model.eval(), chunk_size
        self.caches = [HeavyHitterCache(budget, recent) for _ in model.attn]
        self.pos = 0

    @torch.no_grad()
    def read(self, text):
        ids = torch.tensor(list(text.encode()))
        logits = None
        for start in range(0, ids.numel(), self.chunk_size):
            chunk = ids[start:start + self.chunk_size]
            positions = torch.arange(self.pos, self.pos + chunk.numel())
            logits = self.model(chunk[None], positions, self.caches)
            self.pos += chunk.numel()
        return logits

    @torch.no_grad()
    def answer(self, question, max_new_tokens=16):
        logits = self.read("\nQuestion: " + question + "\nAnswer:")
        out = []
        for _ in range(max_new_tokens):
            tok = int(logits[0, -1].argmax())
            out.append(tok)
            logits = self.model(torch.tensor([[tok]]), torch.tensor([self.pos]), self.caches)
            self.pos += 1
        return bytes(out).decode(errors="replace"), logits


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=int, default=48)
    parser.add_argument("--chunk-size", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)
    document = " ".join(f"Chapter {i}: the ship left port {i} and sailed north for {3 * i} days." for i in range(12))
    reader = StreamingReader(StreamingLM(), budget=args.budget, chunk_size=args.chunk_size)
    reader.read(document)
    reply, last = reader.answer("Where did the ship sail?")
    print(len(document), "bytes read, cache per head:", len(reader.caches[0]), "answer:", repr(reply))
    print("finite:", bool(torch.isfinite(last).all()))
