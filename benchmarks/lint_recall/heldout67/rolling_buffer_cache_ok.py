"""Sliding-window attention with a rotating buffer cache (Mistral-7B style).

The cache holds only `sliding_window` key/value slots per sequence; position
p is written to slot p % sliding_window, so memory stays constant however
long the generation runs.  Long prompts are prefilled in chunks of at most
one window, each chunk reading the buffer and itself.  Queries have eight
heads and keys two (grouped-query attention).

Source: conventions.md sections 1 (direction cheat-sheet: additive masks) and 2.3; seed self_attention_mask_guide.txt sections 3 and 7 (Q3).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    head_dim: int = 8
    hidden_dim: int = 128
    n_heads: int = 8
    n_kv_heads: int = 2
    sliding_window: int = 8
    vocab_size: int = 100
    rope_theta: float = 10000.0


class RotatingBufferCache:
    def __init__(self, args: ModelArgs, batch_size: int):
        shape = (args.n_layers, batch_size, args.sliding_window, args.n_kv_heads, args.head_dim)
        self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)
        self.slot_pos = torch.full((batch_size, args.sliding_window), -1, dtype=torch.long)
        self.window = args.sliding_window

    def keys(self, layer, k, v):
        return torch.cat([self.cache_k[layer], k], dim=1), torch.cat([self.cache_v[layer], v], dim=1)

    def positions(self, chunk_pos):
        return torch.cat([self.slot_pos, chunk_pos], dim=1)

    def write(self, layer, k, v, chunk_pos):
        slots = chunk_pos % self.window
        rows = torch.arange(k.size(0))[:, None]
        self.cache_k[layer][rows, slots] = k
        self.cache_v[layer][rows, slots] = v

    def commit(self, chunk_pos):
        rows = torch.arange(chunk_pos.size(0))[:, None]
        self.slot_pos[rows, chunk_pos % self.window] = chunk_pos


def window_bias(q_pos, k_pos, window):
    delta = q_pos[:, :, None] - k_pos[:, None, :]
    visible = (k_pos[:, None, :] >= 0) & (delta >= 0) & (delta < window)
    return torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))


def rope(x, pos, theta):
    d = x.size(-1)
    freqs = pos[..., None].float() / theta ** (torch.arange(0, d, 2).float() / d)
    cos, sin = freqs.cos()[:, :, None], freqs.sin()[:, :, None]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        self.args, self.layer = args, layer
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)

    def forward(self, x, pos, cache: RotatingBufferCache, bias):
        a = self.args
        b, t, _ = x.shape
        xq = rope(self.wq(x).view(b, t, a.n_heads, a.head_dim), pos, a.rope_theta)
        xk = rope(self.wk(x).view(b, t, a.n_kv_heads, a.head_dim), pos, a.rope_theta)
        xv = self.wv(x).view(b, t, a.n_kv_heads, a.head_dim)
        keys, values = cache.keys(self.layer, xk, xv)
        cache.write(self.layer, xk, xv, pos)
        rep = a.n_heads // a.n_kv_heads
        keys = keys.repeat_interleave(rep, dim=2).transpose(1, 2)
        values = values.repeat_interleave(rep, dim=2).transpose(1, 2)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys, values, attn_mask=bias[:, None])
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        self.attention = Attention(args, layer)
        self.attention_norm, self.ffn_norm = nn.RMSNorm(args.dim, eps=1e-5), nn.RMSNorm(args.dim, eps=1e-5)
        self.w1 = nn.Linear(args.dim, args.hidden_dim, bias=False)
        self.w2 = nn.Linear(args.hidden_dim, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, args.hidden_dim, bias=False)

    def forward(self, x, pos, cache, bias):
        h = x + self.attention(self.attention_norm(x), pos, cache, bias)
        z = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(z)) * self.w3(z))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args, i) for i in range(args.n_layers))
        self.norm = nn.RMSNorm(args.dim, eps=1e-5)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens, pos, cache: RotatingBufferCache):
        bias = window_bias(pos, cache.positions(pos), self.args.sliding_window)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, pos, cache, bias)
        cache.commit(pos)
        return self.output(self.norm(h)).float()


@torch.no_grad()
def generate(model, prompts, max_tokens, chunk_size=None):
    chunk_size = chunk_size or model.args.sliding_window
    batch = torch.tensor(prompts)
    cache = RotatingBufferCache(model.args, batch.size(0))
    for start in range(0, batch.size(1), chunk_size):
        chunk = batch[:, start:start + chunk_size]
        pos = torch.arange(start, start + chunk.size(1)).expand(batch.size(0), -1)
        logits = model(chunk, pos, cache)
    generated, next_pos = [], batch.size(1)
    for _ in range(max_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        generated.append(nxt)
        logits = model(nxt, torch.full_like(nxt, next_pos), cache)
        next_pos += 1
    return torch.cat(generated, dim=1), logits


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Transformer(ModelArgs()).eval()
    prompts = torch.randint(1, 100, (2, 19)).tolist()
    out, last = generate(model, prompts, max_tokens=12)
    print(out.tolist())
    print("finite:", bool(torch.isfinite(last).all()), "cache slots:", model.args.sliding_window)
