"""On-device streaming chat assistant with attention sinks (StreamingLLM-style rolling cache).

The key/value cache keeps the first `sinks` tokens of the conversation and the most recent
`window` tokens; positions are assigned inside the cache. Prefill of a new user turn uses
FlexAttention with a sink-plus-window mask_mod where it is compiled for the device; the
reference path (CPU builds, tests) adds a dense bias to the scores.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3; conventions.md §1 (TensorFlow row, `mask * -1e9`), §2.3
"""
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    flex_attention = None


@dataclass
class StreamConfig:
    vocab: int = 256
    dim: int = 64
    heads: int = 4
    depth: int = 2
    sinks: int = 4
    window: int = 24
    use_flex: bool = False


@functools.lru_cache(maxsize=32)
def sink_window_bias(q_len, kv_len, sinks, window):
    q_pos = torch.arange(kv_len - q_len, kv_len)[:, None]
    kv_pos = torch.arange(kv_len)[None, :]
    keep = (kv_pos <= q_pos) & ((kv_pos < sinks) | (q_pos - kv_pos < window))
    return (1 - keep.float()) * float("-inf")  # expect: MC522 cached


def sink_window_block_mask(q_len, kv_len, sinks, window):
    offset = kv_len - q_len

    def sink_window(b, h, q_idx, kv_idx):
        q_pos = q_idx + offset
        return (kv_idx <= q_pos) & ((kv_idx < sinks) | (q_pos - kv_idx < window))

    return create_block_mask(sink_window, None, None, q_len, kv_len, device="cpu")


class SinkCache:
    def __init__(self, cfg):
        self.sinks, self.window = cfg.sinks, cfg.window
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def evict(self):
        if len(self) > self.sinks + self.window:
            keep = torch.cat([torch.arange(self.sinks), torch.arange(len(self) - self.window, len(self))])
            self.k, self.v = self.k[:, :, keep], self.v[:, :, keep]


def rope(x, positions):
    half = x.shape[-1] // 2
    freqs = 1.0 / 10000 ** (torch.arange(half) / half)
    angles = positions[:, None].float() * freqs
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()], -1)


class StreamingAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.o = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, cache):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        start = len(cache)
        k, v = cache.update(k, v)
        kv_len = k.shape[2]
        positions = torch.arange(kv_len)
        q, k = rope(q, positions[start:]), rope(k, positions)
        if self.cfg.use_flex and flex_attention is not None:
            block_mask = sink_window_block_mask(n, kv_len, self.cfg.sinks, self.cfg.window)
            y = flex_attention(q, k, v, block_mask=block_mask)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            y = torch.softmax(scores + sink_window_bias(n, kv_len, self.cfg.sinks, self.cfg.window), dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, n, d))


class StreamingLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.attn = nn.ModuleList(StreamingAttention(cfg) for _ in range(cfg.depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.SiLU(), nn.Linear(4 * cfg.dim, cfg.dim)) for _ in range(cfg.depth))
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens, caches):
        x = self.embed(tokens)
        for attn, mlp, cache in zip(self.attn, self.mlp, caches):
            x = x + attn(F.rms_norm(x, (x.shape[-1],)), cache)
            x = x + mlp(F.rms_norm(x, (x.shape[-1],)))
        return self.head(F.rms_norm(x, (x.shape[-1],)))


class ChatSession:
    def __init__(self, model):
        self.model = model
        self.caches = [SinkCache(model.cfg) for _ in range(model.cfg.depth)]

    @torch.no_grad()
    def turn(self, prompt_ids, max_new_tokens=16, eos_id=1):
        logits = self.model(prompt_ids[None], self.caches)[:, -1]
        reply = []
        for _ in range(max_new_tokens):
            for cache in self.caches:
                cache.evict()
            token = int(logits.argmax(-1))
            reply.append(token)
            if token == eos_id:
                break
            logits = self.model(torch.tensor([[token]]), self.caches)[:, -1]
        return reply
