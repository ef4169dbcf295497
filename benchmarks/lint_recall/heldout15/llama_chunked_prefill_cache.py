"""Held-out 15: a Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU MLP) with a dynamic KV cache, for an inference server that prefills long prompts in chunks
(`prefill_chunk_size`) and then decodes one token at a time. Padded batches get an explicit bool
mask aligned to the cache; unpadded ones rely on SDPA's `is_causal` for multi-token steps.

Source: pytorch/pytorch#144858 and #103082 (`is_causal=True` with a KV cache: the mask is aligned
top-left, so new queries see only the first keys), qwopqwop200/GPTQ-for-LLaMa PR #187, conventions.md
§1 (SDPA `is_causal` row) and §2.7, `maskcheck explain MC510`. A second prefill chunk (q_len > 1,
keys = cache + chunk) goes through the `is_causal=True` branch: its queries see the first keys of
the cache instead of the whole cache plus their own past.
"""

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


class DynamicCache:
    def __init__(self):
        self.key_cache: List[torch.Tensor] = []
        self.value_cache: List[torch.Tensor] = []

    def get_seq_length(self) -> int:
        return self.key_cache[0].shape[-2] if self.key_cache else 0

    def update(self, key_states, value_states, layer_idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, position_ids, head_dim: int, theta: float = 10000.0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=q.device) / head_dim))
    freqs = position_ids[:, :, None].float() * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None].to(q.dtype), emb.sin()[:, None].to(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class LlamaAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, layer_idx: int):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.layer_idx = num_heads, num_kv_heads, layer_idx
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states, position_ids, attention_mask: Optional[torch.Tensor], past_key_value: DynamicCache):
        bsz, q_len, _ = hidden_states.shape
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        query_states, key_states = apply_rotary(query_states, key_states, position_ids, self.head_dim)
        key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        if attention_mask is None and q_len > 1:
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states, is_causal=True, enable_gqa=True)  # expect: MC510 llama-cache
        else:
            # padded batch (bool mask, True = attend, aligned to the cache) or a single new token
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states, attn_mask=attention_mask, enable_gqa=True)
        return self.o_proj(attn_output.transpose(1, 2).reshape(bsz, q_len, -1))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, intermediate_size: int, layer_idx: int):
        super().__init__()
        self.self_attn = LlamaAttention(hidden_size, num_heads, num_kv_heads, layer_idx)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(hidden_size), LlamaRMSNorm(hidden_size)

    def forward(self, x, position_ids, attention_mask, past_key_value):
        x = x + self.self_attn(self.input_layernorm(x), position_ids, attention_mask, past_key_value)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, vocab_size=256, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128, num_layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(hidden_size, num_heads, num_kv_heads, intermediate_size, i) for i in range(num_layers)])
        self.norm = LlamaRMSNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask: Optional[torch.Tensor], past_key_values: DynamicCache):
        """attention_mask: (B, past + q_len) with 1 = real token, or None for an unpadded batch."""
        past_len, q_len = past_key_values.get_seq_length(), input_ids.shape[1]
        kv_len = past_len + q_len
        position_ids = torch.arange(past_len, kv_len, device=input_ids.device)[None].expand(input_ids.shape[0], -1)
        causal_mask = None
        if attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past_len:]
            causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=input_ids.device).tril(diagonal=past_len)
            causal_mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, position_ids, causal_mask, past_key_values)
        return self.lm_head(self.norm(x))

    @torch.no_grad()
    def prefill(self, input_ids, prefill_chunk_size: int = 512) -> Tuple[torch.Tensor, DynamicCache]:
        cache = DynamicCache()
        for start in range(0, input_ids.shape[1], prefill_chunk_size):
            logits = self(input_ids[:, start:start + prefill_chunk_size], None, cache)
        return logits[:, -1], cache
