"""Paged KV-cache attention for a long-context LLM serving engine with chunked prefill.

Each sequence owns a block table into a pool of fixed-size KV blocks (vLLM-style). Long prompts
are prefilled in chunks of at most `max_num_batched_tokens`, so a chunk's queries attend to the
blocks already written for earlier chunks plus the chunk itself. On the GPU the engine calls
FlashAttention varlen with the block table; the PyTorch reference gathers the blocks.

Source: conventions.md §1 (SDPA is_causal row, varlen row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None


@dataclass
class EngineConfig:
    vocab: int = 256
    dim: int = 64
    heads: int = 4
    depth: int = 2
    block_size: int = 8
    num_blocks: int = 64
    max_num_batched_tokens: int = 16


@dataclass
class SequenceState:
    seq_id: int
    prompt: torch.Tensor
    num_computed: int = 0
    block_table: list[int] = field(default_factory=list)


class PagedKVPool:
    def __init__(self, cfg, layer_count):
        head_dim = cfg.dim // cfg.heads
        shape = (layer_count, cfg.num_blocks, cfg.block_size, cfg.heads, head_dim)
        self.k, self.v = torch.zeros(shape), torch.zeros(shape)
        self.block_size = cfg.block_size
        self.free = list(range(cfg.num_blocks))

    def reserve(self, state, upto):
        while len(state.block_table) * self.block_size < upto:
            state.block_table.append(self.free.pop(0))

    def write(self, layer, state, start, k, v):
        pos = torch.arange(start, start + k.shape[0])
        blocks = torch.tensor(state.block_table)[pos // self.block_size]
        self.k[layer, blocks, pos % self.block_size] = k
        self.v[layer, blocks, pos % self.block_size] = v

    def gather(self, layer, state, length):
        table = torch.tensor(state.block_table, dtype=torch.long)
        k = self.k[layer, table].flatten(0, 1)[:length]
        v = self.v[layer, table].flatten(0, 1)[:length]
        return k, v


def reference_paged_attention(q, k_new, v_new, pool, layer, state, start):
    past_k, past_v = pool.gather(layer, state, start)
    k = torch.cat([past_k, k_new], dim=0)
    v = torch.cat([past_v, v_new], dim=0)
    pool.write(layer, state, start, k_new, v_new)
    q_, k_, v_ = (t.transpose(0, 1)[None] for t in (q, k, v))
    if q_.shape[-2] == 1:
        out = F.scaled_dot_product_attention(q_, k_, v_)
    else:
        out = F.scaled_dot_product_attention(q_, k_, v_, attn_mask=torch.ones(q_.shape[-2], k_.shape[-2], dtype=torch.bool).tril(diagonal=k_.shape[-2] - q_.shape[-2]))
    return out[0].transpose(0, 1)


def rope(x, positions):
    half = x.shape[-1] // 2
    freqs = 1.0 / 10000 ** (torch.arange(half) / half)
    angles = positions[:, None, None].float() * freqs
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()], -1)


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.o = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, positions, pool, state):
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.cfg.heads, -1).unbind(1)
        q, k = rope(q, positions), rope(k, positions)
        start = int(positions[0])
        if flash_attn_varlen_func is not None and x.is_cuda:
            pool.write(self.layer, state, start, k, v)
            k_all, v_all = pool.gather(self.layer, state, start + n)
            cu_q = torch.tensor([0, n], dtype=torch.int32, device=x.device)
            cu_k = torch.tensor([0, start + n], dtype=torch.int32, device=x.device)
            y = flash_attn_varlen_func(q, k_all, v_all, cu_q, cu_k, n, start + n, causal=True)
        else:
            y = reference_paged_attention(q, k, v, pool, self.layer, state, start)
        return self.o(y.reshape(n, -1))


class DecoderLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.attn = nn.ModuleList(Attention(cfg, i) for i in range(cfg.depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.SiLU(), nn.Linear(4 * cfg.dim, cfg.dim)) for _ in range(cfg.depth))
        self.norm = nn.RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens, positions, pool, state):
        x = self.embed(tokens)
        for attn, mlp in zip(self.attn, self.mlp):
            x = x + attn(F.rms_norm(x, (x.shape[-1],)), positions, pool, state)
            x = x + mlp(F.rms_norm(x, (x.shape[-1],)))
        return self.head(self.norm(x))


class Engine:
    def __init__(self, model, cfg):
        self.model, self.cfg = model, cfg
        self.pool = PagedKVPool(cfg, cfg.depth)

    @torch.no_grad()
    def prefill(self, state):
        logits = None
        while state.num_computed < len(state.prompt):
            start = state.num_computed
            end = min(start + self.cfg.max_num_batched_tokens, len(state.prompt))
            self.pool.reserve(state, end)
            logits = self.model(state.prompt[start:end], torch.arange(start, end), self.pool, state)
            state.num_computed = end
        return logits[-1]

    @torch.no_grad()
    def generate(self, state, max_new_tokens=8):
        next_logits = self.prefill(state)
        out = []
        for _ in range(max_new_tokens):
            token = int(next_logits.argmax())
            out.append(token)
            pos = state.num_computed
            self.pool.reserve(state, pos + 1)
            next_logits = self.model(torch.tensor([token]), torch.tensor([pos]), self.pool, state)[-1]
            state.num_computed += 1
        return out
