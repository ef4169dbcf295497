"""Held-out 15 (correct twin): a decoder-only language model with T5's bucketed relative position bias (HF
`T5Attention` layout: `relative_attention_bias` in the first layer only, `compute_bias`, no
scaling of the scores, RMS-style T5LayerNorm). Batched generation left-pads the prompts, so the
stack builds a causal plane and a padding plane and adds the result to the position bias.

Source: huggingface/transformers PR #27114 ("[AttentionMaskConverter] Fix-mask-inf": a causal
finfo.min plane and a padding finfo.min plane summed overflow to -inf), NVIDIA-NeMo/Automodel PR
#2658 (bf16 causal + padding finfo.min planes summed), conventions.md §2.3, `maskcheck explain
MC513`. Where a key is both padding and in the future the sum is -inf, and the padded query rows
put their weight on a future key.
Twin: the planes are combined with `torch.minimum`, which stays at finfo.min where both hide a key.
"""

import math
from typing import Optional, Tuple

import torch
from torch import nn


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(self.weight.dtype)


class T5Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, has_relative_attention_bias: bool = False,
                 num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.n_heads, self.d_kv = n_heads, d_model // n_heads
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.has_relative_attention_bias = has_relative_attention_bias
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
        # unidirectional: only attention to the past gets distinct buckets
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, num_buckets - 1))
        return torch.where(is_small, relative_position, large)

    def compute_bias(self, query_length: int, key_length: int, device=None) -> torch.Tensor:
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = self._relative_position_bucket(memory_position - context_position, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)  # (1, H, q, k)

    def forward(self, hidden_states: torch.Tensor, mask: torch.Tensor,
                position_bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = hidden_states.shape
        shape = lambda t: t.view(b, n, self.n_heads, self.d_kv).transpose(1, 2)
        q, k, v = shape(self.q(hidden_states)), shape(self.k(hidden_states)), shape(self.v(hidden_states))
        scores = torch.matmul(q, k.transpose(3, 2))  # T5 does not scale by 1/sqrt(d)
        if position_bias is None:
            position_bias = self.compute_bias(n, n, device=scores.device).to(scores.dtype)
            position_bias = position_bias + mask  # (B, H, q, k)
        attn_weights = nn.functional.softmax(scores.float() + position_bias.float(), dim=-1).type_as(scores)
        out = torch.matmul(attn_weights, v).transpose(1, 2).reshape(b, n, -1)
        return self.o(out), position_bias


class T5Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, has_relative_attention_bias: bool):
        super().__init__()
        self.ln1, self.ln2 = T5LayerNorm(d_model), T5LayerNorm(d_model)
        self.attn = T5Attention(d_model, n_heads, has_relative_attention_bias)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff, bias=False), nn.ReLU(), nn.Linear(d_ff, d_model, bias=False))

    def forward(self, x, mask, position_bias=None):
        h, position_bias = self.attn(self.ln1(x), mask, position_bias)
        x = x + h
        return x + self.ff(self.ln2(x)), position_bias


class T5DecoderLM(nn.Module):
    def __init__(self, vocab_size: int = 256, d_model: int = 64, n_heads: int = 4, d_ff: int = 128, n_layers: int = 2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.block = nn.ModuleList([T5Block(d_model, n_heads, d_ff, i == 0) for i in range(n_layers)])
        self.final_layer_norm = T5LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids (B, n) left-padded; attention_mask (B, n) 1 = real token."""
        x = self.embed_tokens(input_ids)
        dtype, n = x.dtype, input_ids.shape[1]
        min_value = torch.finfo(dtype).min
        future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
        causal_bias = torch.zeros(n, n, dtype=dtype, device=x.device).masked_fill(future, min_value)[None, None]
        padding_bias = (1.0 - attention_mask[:, None, None, :].to(dtype)) * min_value
        extended_attention_mask = torch.minimum(causal_bias, padding_bias)
        position_bias = None
        for layer in self.block:
            x, position_bias = layer(x, extended_attention_mask, position_bias)
        return self.lm_head(self.final_layer_norm(x))
