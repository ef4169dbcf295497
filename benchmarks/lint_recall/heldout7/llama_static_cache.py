"""Held-out 7: a Llama-style attention module with a static KV cache written by `index_copy_`,
grouped-query heads and a bf16 sliding-window mask builder.

Source: conventions.md section 2.7 (`is_causal=True` beside an explicit attn_mask, here passed
positionally as SDPA's 4th and 6th arguments; and the top-left alignment of `is_causal` when the
keys are a whole static cache), huggingface/transformers#47651 / unslothai/unsloth PR #9848 (cached
generation), lerobot PR #710 and conventions.md section 2.3 (the float32 minimum in a bf16/fp16
tensor, here `torch.full(..., fill_value=torch.finfo(torch.float32).min, dtype=torch.float16)`).
Surroundings: a config dataclass, `index_copy_` cache, positional SDPA, keyword torch.full, GQA
`repeat_interleave`, `@torch.compile`.
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    hidden_size: int = 1024
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    max_position_embeddings: int = 2048
    sliding_window: int = 512
    max_batch_size: int = 4


def sliding_window_bias(q_len: int, kv_len: int, window: int, device=None) -> torch.Tensor:
    bias = torch.full((q_len, kv_len), fill_value=torch.finfo(torch.float32).min,  # expect: MC517 keyword
                      dtype=torch.float16, device=device)
    i = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)
    j = torch.arange(kv_len, device=device)[None, :]
    return bias.masked_fill((j <= i) & (j > i - window), 0.0)


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = config.hidden_size // self.n_heads
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=False)
        shape = (config.max_batch_size, self.n_kv, config.max_position_embeddings, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def _project(self, x: torch.Tensor):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
        return q, k, v

    def forward(self, x: torch.Tensor, attention_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Prefill / training path: no cache."""
        b, n, _ = x.shape
        q, k, v = self._project(x)
        rep = self.n_heads // self.n_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attention_bias, 0.0, True)  # expect: MC506 positional
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))

    @torch.compile(dynamic=True)
    def decode(self, x: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        """Chunked decode: the new tokens are written into the static cache at cache_position."""
        b, n, _ = x.shape
        q, k_new, v_new = self._project(x)
        self.k_cache[:b].index_copy_(2, cache_position, k_new)
        self.v_cache[:b].index_copy_(2, cache_position, v_new)
        end = int(cache_position[-1]) + 1
        k = self.k_cache[:b, :, :end]
        v = self.v_cache[:b, :, :end]
        rep = self.n_heads // self.n_kv
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=rep > 1)  # expect: MC510 method
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))
