"""Llama inference with a preallocated key/value cache, chunked prompt prefill and batched decoding.

Layout of meta-llama/llama (llama/model.py: ModelArgs, RMSNorm, precompute_freqs_cis,
Attention with cache_k / cache_v; llama/generation.py: generate with input_text_mask).
Source: conventions.md §1 (SDPA is_causal row) and §2.7, pytorch/pytorch PR #111007
(conventions.md §1), conventions.md §5 item 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = 2
    vocab_size: int = 259
    multiple_of: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_batch_size: int = 4
    max_seq_len: int = 96
    use_sdpa: bool = True


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end, device=freqs.device), freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_local_heads, self.n_rep = args.n_heads, args.n_heads // self.n_kv_heads
        self.head_dim, self.use_sdpa = args.dim // args.n_heads, args.use_sdpa
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        cache_shape = (args.max_batch_size, args.max_seq_len, self.n_kv_heads, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(cache_shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(cache_shape), persistent=False)

    def forward(
        self, x: torch.Tensor, start_pos: int, freqs_cis: torch.Tensor, mask: torch.Tensor | None
    ):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos : start_pos + seqlen] = xv
        keys = repeat_kv(self.cache_k[:bsz, : start_pos + seqlen], self.n_rep).transpose(1, 2)
        values = repeat_kv(self.cache_v[:bsz, : start_pos + seqlen], self.n_rep).transpose(1, 2)
        xq = xq.transpose(1, 2)
        if self.use_sdpa:
            output = F.scaled_dot_product_attention(xq, keys, values, is_causal=seqlen > 1)  # expect: MC510 llama
        else:
            scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores + mask
            output = torch.matmul(F.softmax(scores.float(), dim=-1).type_as(xq), values)
        return self.wo(output.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int) -> None:
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1, self.w3 = (
            nn.Linear(dim, hidden_dim, bias=False),
            nn.Linear(dim, hidden_dim, bias=False),
        )
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs) -> None:
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.freqs_cis = precompute_freqs_cis(
            params.dim // params.n_heads, params.max_seq_len * 2, params.rope_theta
        )

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack(
                [torch.zeros((seqlen, start_pos), device=tokens.device), mask]
            ).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        return self.output(self.norm(h)).float()


class ByteTokenizer:
    bos_id, eos_id, pad_id = 256, 257, 258

    def encode(self, s: str, bos: bool = True) -> list[int]:
        return ([self.bos_id] if bos else []) + list(s.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class Llama:
    def __init__(
        self, model: Transformer, tokenizer: ByteTokenizer, prefill_chunk_size: int = 16
    ) -> None:
        self.model, self.tokenizer, self.prefill_chunk_size = model, tokenizer, prefill_chunk_size

    def prefill(self, tokens: torch.Tensor, upto: int) -> torch.Tensor:
        logits = None
        for start in range(0, upto, self.prefill_chunk_size):
            logits = self.model.forward(
                tokens[:, start : min(upto, start + self.prefill_chunk_size)], start
            )
        return logits

    @torch.inference_mode()
    def generate(
        self, prompt_tokens: list[list[int]], max_gen_len: int
    ) -> tuple[list[list[int]], torch.Tensor]:
        params = self.model.params
        bsz = len(prompt_tokens)
        min_prompt_len, max_prompt_len = min(map(len, prompt_tokens)), max(map(len, prompt_tokens))
        total_len = min(params.max_seq_len, max_gen_len + max_prompt_len)
        tokens = torch.full((bsz, total_len), self.tokenizer.pad_id, dtype=torch.long)
        for k, t in enumerate(prompt_tokens):
            tokens[k, : len(t)] = torch.tensor(t, dtype=torch.long)
        input_text_mask = tokens != self.tokenizer.pad_id
        logits = self.prefill(tokens, min_prompt_len)
        first_logits = logits[:, -1].clone()
        prev_pos = min_prompt_len
        for cur_pos in range(min_prompt_len, total_len):
            next_token = torch.argmax(logits[:, -1], dim=-1)
            next_token = torch.where(input_text_mask[:, cur_pos], tokens[:, cur_pos], next_token)
            tokens[:, cur_pos] = next_token
            logits = self.model.forward(tokens[:, prev_pos : cur_pos + 1], prev_pos)
            prev_pos = cur_pos + 1
        out = []
        for i, toks in enumerate(tokens.tolist()):
            toks = toks[len(prompt_tokens[i]) : len(prompt_tokens[i]) + max_gen_len]
            out.append(
                toks[: toks.index(self.tokenizer.eos_id)] if self.tokenizer.eos_id in toks else toks
            )
        return out, first_logits


if __name__ == "__main__":
    torch.manual_seed(0)
    args = ModelArgs()
    model = Transformer(args).eval()
    tokenizer = ByteTokenizer()
    prompts = [
        "The key and value cache holds every earlier position of the prompt,",
        "Chunked prefill bounds the activation memory of a long prompt:",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):",
    ]
    prompt_tokens = [tokenizer.encode(p) for p in prompts]
    chunked = Llama(model, tokenizer, prefill_chunk_size=16)
    whole = Llama(model, tokenizer, prefill_chunk_size=args.max_seq_len)
    out_chunked, logits_chunked = chunked.generate(prompt_tokens, max_gen_len=16)
    out_whole, logits_whole = whole.generate(prompt_tokens, max_gen_len=16)
    print(
        "first-token logits, chunked vs whole prefill:",
        (logits_chunked - logits_whole).abs().max().item(),
    )
    print(
        "same continuations:",
        sum(a == b for a, b in zip(out_chunked, out_whole, strict=True)),
        "of",
        len(prompts),
    )
    for layer in model.layers:
        layer.attention.use_sdpa = False
    _, logits_eager = chunked.generate(prompt_tokens, max_gen_len=16)
    print("sdpa vs eager (chunked):", (logits_chunked - logits_eager).abs().max().item())
