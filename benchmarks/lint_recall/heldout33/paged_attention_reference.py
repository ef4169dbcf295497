"""Reference paged-attention serving loop: block tables over a shared key/value cache.

Structured like vLLM's engine and its reference kernels: a ``BlockAllocator`` hands out
fixed-size cache blocks, a ``BlockSpaceManager`` keeps each sequence's block table and appends a
slot per decoded token, ``reshape_and_cache`` writes new keys and values through a slot
mapping, prompts run ``ref_prompt_attention`` with a causal bias, and decode steps run
``ref_paged_attention`` over keys gathered from the block tables of sequences of different
lengths (grouped-query heads repeated to the query heads). ``AttentionMetadata`` carries the
slot mapping, block tables and context lengths into every layer.

Source: huggingface/lerobot PR #710, NVIDIA/apex#1052, conventions.md §2.3, tools.md §0 P5
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn


@dataclass
class CacheConfig:
    block_size: int = 4
    num_blocks: int = 64
    cache_dtype: torch.dtype = torch.float32


@dataclass
class ModelConfig:
    vocab_size: int = 40
    hidden_size: int = 64
    num_heads: int = 4
    num_kv_heads: int = 2
    num_layers: int = 2

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass
class AttentionMetadata:
    is_prompt: bool
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor | None = None
    context_lens: torch.Tensor | None = None


@dataclass
class Sequence:
    seq_id: int
    token_ids: list[int]
    block_table: list[int] = field(default_factory=list)


class BlockAllocator:
    def __init__(self, num_blocks: int):
        self.free_blocks = list(range(num_blocks - 1, -1, -1))

    def allocate(self) -> int:
        if not self.free_blocks:
            raise RuntimeError("Out of memory! No free blocks are available.")
        return self.free_blocks.pop()

    def free(self, block: int) -> None:
        self.free_blocks.append(block)


class BlockSpaceManager:
    def __init__(self, cache_config: CacheConfig):
        self.block_size = cache_config.block_size
        self.allocator = BlockAllocator(cache_config.num_blocks)

    def allocate(self, seq: Sequence) -> None:
        num_blocks = math.ceil(len(seq.token_ids) / self.block_size)
        seq.block_table = [self.allocator.allocate() for _ in range(num_blocks)]

    def append_slot(self, seq: Sequence) -> None:
        if len(seq.token_ids) > len(seq.block_table) * self.block_size:
            seq.block_table.append(self.allocator.allocate())

    def slot(self, seq: Sequence, position: int) -> int:
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def free(self, seq: Sequence) -> None:
        for block in seq.block_table:
            self.allocator.free(block)
        seq.block_table = []


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping) -> None:
    block_size = key_cache.shape[1]
    key_cache[slot_mapping // block_size, slot_mapping % block_size] = key.to(key_cache.dtype)
    value_cache[slot_mapping // block_size, slot_mapping % block_size] = value.to(value_cache.dtype)


def ref_prompt_attention(query, key, value, scale, num_queries_per_kv):
    seq_len = query.shape[0]
    key = key.repeat_interleave(num_queries_per_kv, dim=1)
    value = value.repeat_interleave(num_queries_per_kv, dim=1)
    attn_bias = torch.triu(torch.full((seq_len, seq_len), float("-inf"), dtype=query.dtype), diagonal=1)
    scores = scale * torch.einsum("qhd,khd->hqk", query, key) + attn_bias
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), value)


def ref_paged_attention(query, key_cache, value_cache, block_tables, context_lens, scale, num_queries_per_kv):
    block_size = key_cache.shape[1]
    max_context_len = int(context_lens.max())
    positions = torch.arange(max_context_len)
    block_numbers = block_tables.gather(1, (positions // block_size)[None].expand(len(context_lens), -1))
    keys = key_cache[block_numbers, positions % block_size].repeat_interleave(num_queries_per_kv, dim=2)
    values = value_cache[block_numbers, positions % block_size].repeat_interleave(num_queries_per_kv, dim=2)
    scores = scale * torch.einsum("nhd,nkhd->nhk", query.to(keys.dtype), keys)
    ctx_keep = positions[None, :] < context_lens[:, None]
    scores = scores.masked_fill(~ctx_keep[:, None, :], torch.finfo(torch.float32).min)  # expect: MC517 pagedattn
    probs = scores.softmax(dim=-1)
    return torch.einsum("nhk,nkhd->nhd", probs, values)


class PagedAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_size = cfg.num_heads, cfg.num_kv_heads, cfg.head_size
        self.qkv_proj = nn.Linear(cfg.hidden_size, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_size)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.scale = cfg.head_size ** -0.5

    def forward(self, hidden_states, kv_cache, attn_metadata: AttentionMetadata, prompt_lens: list[int]):
        q_size, kv_size = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        q, k, v = self.qkv_proj(hidden_states).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_size)
        k = k.view(-1, self.num_kv_heads, self.head_size)
        v = v.view(-1, self.num_kv_heads, self.head_size)
        key_cache, value_cache = kv_cache
        reshape_and_cache(k, v, key_cache, value_cache, attn_metadata.slot_mapping)
        group = self.num_heads // self.num_kv_heads
        if attn_metadata.is_prompt:
            outs, start = [], 0
            for n in prompt_lens:
                outs.append(ref_prompt_attention(q[start:start + n], k[start:start + n], v[start:start + n], self.scale, group))
                start += n
            out = torch.cat(outs)
        else:
            out = ref_paged_attention(q, key_cache, value_cache, attn_metadata.block_tables, attn_metadata.context_lens, self.scale, group)
        return self.o_proj(out.reshape(-1, q_size).to(hidden_states.dtype))


class PagedLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_positions = nn.Embedding(128, cfg.hidden_size)
        self.layers = nn.ModuleList(PagedAttention(cfg) for _ in range(cfg.num_layers))
        self.mlps = nn.ModuleList(nn.Sequential(nn.LayerNorm(cfg.hidden_size), nn.Linear(cfg.hidden_size, 2 * cfg.hidden_size), nn.GELU(), nn.Linear(2 * cfg.hidden_size, cfg.hidden_size)) for _ in range(cfg.num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.hidden_size) for _ in range(cfg.num_layers))
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, positions, kv_caches, attn_metadata, prompt_lens=()):
        h = self.embed_tokens(input_ids) + self.embed_positions(positions)
        for attn, mlp, norm, kv_cache in zip(self.layers, self.mlps, self.norms, kv_caches):
            h = h + attn(norm(h), kv_cache, attn_metadata, list(prompt_lens))
            h = h + mlp(h)
        return self.lm_head(h)


class LLMEngine:
    def __init__(self, model: PagedLM, model_config: ModelConfig, cache_config: CacheConfig):
        self.model, self.block_manager = model, BlockSpaceManager(cache_config)
        shape = (cache_config.num_blocks, cache_config.block_size, model_config.num_kv_heads, model_config.head_size)
        self.kv_caches = [(torch.zeros(shape, dtype=cache_config.cache_dtype), torch.zeros(shape, dtype=cache_config.cache_dtype)) for _ in range(model_config.num_layers)]

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        seqs = [Sequence(i, list(p)) for i, p in enumerate(prompts)]
        for seq in seqs:
            self.block_manager.allocate(seq)
        ids = torch.tensor([t for s in seqs for t in s.token_ids])
        positions = torch.cat([torch.arange(len(s.token_ids)) for s in seqs])
        slots = torch.tensor([self.block_manager.slot(s, p) for s in seqs for p in range(len(s.token_ids))])
        logits = self.model(ids, positions, self.kv_caches, AttentionMetadata(True, slots), [len(s.token_ids) for s in seqs])
        last = torch.tensor([len(s.token_ids) for s in seqs]).cumsum(0) - 1
        next_tokens = logits[last].argmax(-1)
        for _ in range(max_tokens - 1):
            for seq, tok in zip(seqs, next_tokens.tolist()):
                seq.token_ids.append(tok)
                self.block_manager.append_slot(seq)
            positions = torch.tensor([len(s.token_ids) - 1 for s in seqs])
            slots = torch.tensor([self.block_manager.slot(s, len(s.token_ids) - 1) for s in seqs])
            width = max(len(s.block_table) for s in seqs)
            block_tables = torch.tensor([s.block_table + [0] * (width - len(s.block_table)) for s in seqs])
            meta = AttentionMetadata(False, slots, block_tables, torch.tensor([len(s.token_ids) for s in seqs]))
            next_tokens = self.model(torch.tensor([s.token_ids[-1] for s in seqs]), positions, self.kv_caches, meta).argmax(-1)
        for seq, tok in zip(seqs, next_tokens.tolist()):
            seq.token_ids.append(tok)
            self.block_manager.free(seq)
        return [s.token_ids[len(p):] for s, p in zip(seqs, prompts)]


@torch.no_grad()
def dense_generate(model: PagedLM, cfg: ModelConfig, prompt: list[int], max_tokens: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_tokens):
        shape = (32, 4, cfg.num_kv_heads, cfg.head_size)
        caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.num_layers)]
        n = len(tokens)
        logits = model(torch.tensor(tokens), torch.arange(n), caches, AttentionMetadata(True, torch.arange(n)), [n])
        tokens.append(int(logits[-1].argmax()))
    return tokens[len(prompt):]


def main() -> None:
    torch.manual_seed(0)
    model_config = ModelConfig()
    model = PagedLM(model_config).eval()
    prompts = [[3, 17, 5], [9, 2, 33, 7, 21, 4, 11], [30, 6, 12, 25, 8]]
    outputs = LLMEngine(model, model_config, CacheConfig()).generate(prompts, max_tokens=10)
    for prompt, out in zip(prompts, outputs):
        ref = dense_generate(model, model_config, prompt, 10)
        print(f"float32 paged vs dense, prompt of {len(prompt)}: {sum(a == b for a, b in zip(out, ref))}/10 tokens agree")
    half_model = PagedLM(model_config).eval()
    half_model.load_state_dict(model.state_dict())
    half_model = half_model.half()
    try:
        half_outputs = LLMEngine(half_model, model_config, CacheConfig(cache_dtype=torch.float16)).generate(prompts, max_tokens=10)
        agree = sum(a == b for o, h in zip(outputs, half_outputs) for a, b in zip(o, h))
        print(f"float16 engine vs float32 engine: {agree}/30 tokens agree")
    except RuntimeError as err:
        print(f"float16 engine: RuntimeError: {err}")


if __name__ == "__main__":
    main()
