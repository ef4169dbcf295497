"""vLLM-style torch SDPA attention backend: a paged KV cache (`key_cache` / `value_cache` in blocks),
`slot_mapping`, `block_tables`, and metadata that splits a batch into prefill and decode tokens.

Each prefill sequence is run in a `for` loop: its keys are gathered from the paged cache (the cached
prefix plus the new chunk, so with prefix caching or chunked prefill `kv_len > q_len`) and attended
with a bottom-right causal keep-mask (correct twin); decode tokens attend to all cached keys.

Source: conventions.md §1 (SDPA `is_causal` is tril(diagonal=0), aligned top-left when L != S;
`causal_lower_right` for KV-cache alignment) and §2.7, pytorch/pytorch PR #111007.
"""
from dataclasses import dataclass
from typing import List

import torch
from torch.nn.functional import scaled_dot_product_attention


@dataclass
class TorchSDPAMetadata:
    num_prefills: int
    query_lens: List[int]  # new tokens per sequence (1 for decodes)
    context_lens: List[int]  # tokens already in the cache before this step
    slot_mapping: torch.Tensor  # [num_tokens] flat cache slot of every new token
    block_tables: torch.Tensor  # [num_seqs, max_blocks]


def write_to_paged_cache(key, value, key_cache, value_cache, slot_mapping):
    block_size = key_cache.shape[1]
    key_cache[slot_mapping // block_size, slot_mapping % block_size] = key
    value_cache[slot_mapping // block_size, slot_mapping % block_size] = value


def gather_from_paged_cache(cache, block_table, kv_len):
    return cache[block_table].flatten(0, 1)[:kv_len]  # [kv_len, num_kv_heads, head_size]


class TorchSDPABackendImpl:
    def __init__(self, num_heads: int, head_size: int, scale: float):
        self.num_heads, self.head_size, self.scale = num_heads, head_size, scale

    def forward(self, query, key, value, kv_cache, attn_metadata: TorchSDPAMetadata):
        """query/key/value: [num_tokens, num_heads, head_size]; prefill tokens come first."""
        key_cache, value_cache = kv_cache
        write_to_paged_cache(key, value, key_cache, value_cache, attn_metadata.slot_mapping)
        output = torch.empty_like(query)
        start = 0
        for i, (q_len, ctx_len) in enumerate(zip(attn_metadata.query_lens, attn_metadata.context_lens)):
            end, kv_len = start + q_len, ctx_len + q_len
            k = gather_from_paged_cache(key_cache, attn_metadata.block_tables[i], kv_len).movedim(0, 1)
            v = gather_from_paged_cache(value_cache, attn_metadata.block_tables[i], kv_len).movedim(0, 1)
            q = query[start:end].movedim(0, 1)  # [num_heads, q_len, head_size]
            if i < attn_metadata.num_prefills:
                out = scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril(kv_len - q_len), dropout_p=0.0, scale=self.scale)
            else:
                out = scaled_dot_product_attention(q[None], k[None], v[None], dropout_p=0.0, is_causal=False, scale=self.scale)
            output[start:end] = out[0].movedim(1, 0)
            start = end
        return output


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        self.block_size, self.free = block_size, list(range(num_blocks))
        self.tables, self.lens = {}, {}

    def append_slots(self, seq_id: int, n: int) -> List[int]:
        table, length = self.tables.setdefault(seq_id, []), self.lens.get(seq_id, 0)
        slots = []
        for pos in range(length, length + n):
            if pos // self.block_size >= len(table):
                table.append(self.free.pop(0))
            slots.append(table[pos // self.block_size] * self.block_size + pos % self.block_size)
        self.lens[seq_id] = length + n
        return slots


def run_step(impl, kv_cache, manager, seq_ids, chunks, num_prefills, proj):
    context_lens = [manager.lens.get(s, 0) for s in seq_ids]
    slots = [slot for s, c in zip(seq_ids, chunks) for slot in manager.append_slots(s, c.shape[0])]
    max_blocks = max(len(manager.tables[s]) for s in seq_ids)
    block_tables = torch.tensor([manager.tables[s] + [0] * (max_blocks - len(manager.tables[s])) for s in seq_ids])
    meta = TorchSDPAMetadata(num_prefills, [c.shape[0] for c in chunks], context_lens, torch.tensor(slots), block_tables)
    x = torch.cat(chunks)
    q, k, v = [(x @ w).view(x.shape[0], impl.num_heads, impl.head_size) for w in proj]
    return impl.forward(q, k, v, kv_cache, meta)


if __name__ == "__main__":
    torch.manual_seed(0)
    num_heads, head_size, block_size = 2, 8, 4
    impl = TorchSDPABackendImpl(num_heads, head_size, scale=head_size**-0.5)
    proj = [torch.randn(16, num_heads * head_size) * 0.3 for _ in range(3)]
    prompt = torch.randn(10, 16)

    def new_cache():
        return torch.zeros(8, block_size, num_heads, head_size), torch.zeros(8, block_size, num_heads, head_size)

    whole = run_step(impl, new_cache(), BlockManager(8, block_size), [0], [prompt], 1, proj)
    cache, manager = new_cache(), BlockManager(8, block_size)
    first = run_step(impl, cache, manager, [0], [prompt[:6]], 1, proj)  # chunked prefill: 6 tokens, then 3
    second = run_step(impl, cache, manager, [0], [prompt[6:9]], 1, proj)
    decode = run_step(impl, cache, manager, [0], [prompt[9:]], 0, proj)  # then one decode token
    print("chunked prefill + decode vs whole prompt:", (torch.cat([first, second, decode]) - whole).abs().max().item())
