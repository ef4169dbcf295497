"""A small LLM inference server with a paged KV cache and automatic prefix caching.

vLLM-style pieces around a Llama-architecture model: a `BlockAllocator` with reference
counts, a `PagedKVCache` holding fixed-size key/value blocks per layer, per-request block
tables, a hash-chained prefix cache so that requests sharing a system prompt reuse its
blocks, and an `LLMEngine` that prefills the uncached part of each prompt and then decodes
greedily, one token per request per step. The demo serves four chat requests with prefix
caching on and off.

Source: conventions.md §1 (SDPA is_causal row) and §2.7; pytorch/pytorch PR #111007
(conventions.md §1); conventions.md §5 item 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 96
    max_seq_len: int = 128
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


@dataclass
class CacheConfig:
    block_size: int = 8
    num_blocks: int = 64
    enable_prefix_caching: bool = True


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    return torch.polar(torch.ones(end, dim // 2), torch.outer(torch.arange(end).float(), freqs))


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[None, :, None, :]
    return torch.view_as_real(xq_ * freqs_cis).flatten(3), torch.view_as_real(
        xk_ * freqs_cis
    ).flatten(3)


class BlockAllocator:
    def __init__(self, num_blocks: int):
        self.free_blocks = list(range(num_blocks))[::-1]
        self.ref_counts = [0] * num_blocks

    def allocate(self) -> int:
        block = self.free_blocks.pop()
        self.ref_counts[block] = 1
        return block

    def share(self, block: int) -> int:
        self.ref_counts[block] += 1
        return block

    def free(self, block: int) -> None:
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_blocks.append(block)


class PagedKVCache:
    def __init__(self, args: ModelArgs, cfg: CacheConfig):
        head_dim = args.dim // args.n_heads
        shape = (args.n_layers, cfg.num_blocks, cfg.block_size, args.n_kv_heads, head_dim)
        self.block_size = cfg.block_size
        self.k_cache = torch.zeros(shape)
        self.v_cache = torch.zeros(shape)

    def _slots(self, block_table: list[int], start: int, end: int):
        pos = torch.arange(start, end)
        blocks = torch.tensor(block_table, dtype=torch.long)[pos // self.block_size]
        return blocks, pos % self.block_size

    def update(self, layer: int, block_table: list[int], start_pos: int, k, v):
        """Write k, v (T, H, D) at start_pos and return the keys and values of 0..start_pos+T."""
        end = start_pos + k.shape[0]
        blocks, offsets = self._slots(block_table, start_pos, end)
        self.k_cache[layer, blocks, offsets] = k
        self.v_cache[layer, blocks, offsets] = v
        blocks, offsets = self._slots(block_table, 0, end)
        return self.k_cache[layer, blocks, offsets], self.v_cache[layer, blocks, offsets]


@dataclass
class Request:
    request_id: int
    prompt: list[int]
    max_new_tokens: int
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0
    output: list[int] = field(default_factory=list)
    first_logits: torch.Tensor | None = None


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.n_heads, self.n_kv_heads = args.n_heads, args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, freqs_cis, req: Request, cache: PagedKVCache):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys, values = cache.update(self.layer_id, req.block_table, req.num_computed, xk[0], xv[0])
        n_rep = self.n_heads // self.n_kv_heads
        keys = keys.repeat_interleave(n_rep, dim=1)[None].transpose(1, 2)
        values = values.repeat_interleave(n_rep, dim=1)[None].transpose(1, 2)
        xq = xq.transpose(1, 2)
        output = F.scaled_dot_product_attention(xq, keys, values, is_causal=xq.shape[2] > 1)  # expect: MC510 paged
        return self.wo(output.transpose(1, 2).reshape(bsz, seqlen, -1))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int):
        super().__init__()
        self.attention = Attention(args, layer_id)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.w1 = nn.Linear(args.dim, 4 * args.dim, bias=False)
        self.w2 = nn.Linear(4 * args.dim, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, 4 * args.dim, bias=False)

    def forward(self, x, freqs_cis, req, cache):
        h = x + self.attention(self.attention_norm(x), freqs_cis, req, cache)
        f = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(f)) * self.w3(f))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args, i) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        freqs = precompute_freqs_cis(args.dim // args.n_heads, args.max_seq_len, args.rope_theta)
        self.register_buffer("freqs_cis", freqs, persistent=False)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, req: Request, cache: PagedKVCache):
        start = req.num_computed
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start : start + tokens.shape[1]]
        for layer in self.layers:
            h = layer(h, freqs_cis, req, cache)
        return self.output(self.norm(h))[:, -1]


class LLMEngine:
    def __init__(self, model: Transformer, args: ModelArgs, cfg: CacheConfig):
        self.model, self.cfg = model, cfg
        self.allocator = BlockAllocator(cfg.num_blocks)
        self.cache = PagedKVCache(args, cfg)
        self.prefix_table: dict[tuple[int, ...], int] = {}
        self.running: list[Request] = []
        self.finished: list[Request] = []

    def add_request(self, request_id: int, prompt: list[int], max_new_tokens: int = 6):
        req = Request(request_id, prompt, max_new_tokens)
        bs = self.cfg.block_size
        if self.cfg.enable_prefix_caching:
            for i in range((len(prompt) - 1) // bs):
                block = self.prefix_table.get(tuple(prompt[: (i + 1) * bs]))
                if block is None:
                    break
                req.block_table.append(self.allocator.share(block))
                req.num_computed += bs
        self.running.append(req)

    def _ensure_blocks(self, req: Request, length: int):
        while len(req.block_table) * self.cfg.block_size < length:
            req.block_table.append(self.allocator.allocate())

    def _register_prefix(self, req: Request):
        bs = self.cfg.block_size
        for i in range(len(req.prompt) // bs):
            key = tuple(req.prompt[: (i + 1) * bs])
            if key not in self.prefix_table:
                self.prefix_table[key] = self.allocator.share(req.block_table[i])

    def step(self):
        for req in list(self.running):
            if not req.output:
                new_tokens = req.prompt[req.num_computed :]
            else:
                new_tokens = req.output[-1:]
            self._ensure_blocks(req, req.num_computed + len(new_tokens))
            logits = self.model(torch.tensor([new_tokens]), req, self.cache)
            if not req.output:
                req.first_logits = logits[0]
                if self.cfg.enable_prefix_caching:
                    self._register_prefix(req)
            req.num_computed += len(new_tokens)
            req.output.append(int(logits.argmax(-1)))
            if len(req.output) >= req.max_new_tokens:
                for block in req.block_table:
                    self.allocator.free(block)
                self.running.remove(req)
                self.finished.append(req)

    def run(self):
        while self.running:
            self.step()
        return sorted(self.finished, key=lambda r: r.request_id)


def main():
    torch.manual_seed(0)
    args = ModelArgs()
    model = Transformer(args).eval()
    gen = torch.Generator().manual_seed(0)
    system = torch.randint(3, args.vocab_size, (19,), generator=gen).tolist()
    prompts = [
        system + torch.randint(3, args.vocab_size, (n,), generator=gen).tolist()
        for n in (5, 7, 9, 6)
    ]
    results = {}
    for caching in (False, True):
        engine = LLMEngine(model, args, CacheConfig(enable_prefix_caching=caching))
        for i, p in enumerate(prompts):
            engine.add_request(i, p)
            if i == 0:
                engine.step()
        results[caching] = engine.run()
    for off, on in zip(results[False], results[True]):
        diff = (off.first_logits - on.first_logits).abs().max().item()
        print(
            f"request {off.request_id}: {off.output} vs {on.output} (first-token logits {diff:.2e})"
        )
    same = sum(off.output == on.output for off, on in zip(results[False], results[True]))
    print(f"prefix caching on/off agree on {same} of {len(prompts)} requests")


if __name__ == "__main__":
    main()
