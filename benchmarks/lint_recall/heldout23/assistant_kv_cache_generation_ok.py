"""Incremental decoding with a key/value cache, written the way a coding assistant answers
"add KV caching to my small GPT".

Type hints everywhere, an ``AttentionType`` enum, a ``LayerCache`` dataclass with an ``update``
method, Args/Returns docstrings, logging, and a ``generate`` helper that can run with or without
the cache so the two can be compared.

Source: conventions.md section 1 (the SDPA is_causal row: upper-left aligned when L != S),
section 2.7 and section 5 item 8, pytorch/pytorch PR #111007 (is_causal with cached keys).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class AttentionType(str, Enum):
    """Which positions a query may attend to."""

    CAUSAL = "causal"
    BIDIRECTIONAL = "bidirectional"


@dataclass
class LayerCache:
    """Keys and values of one layer, shape ``(batch, heads, seen_tokens, head_dim)``."""

    key: Optional[torch.Tensor] = None
    value: Optional[torch.Tensor] = None

    def update(self, key: torch.Tensor, value: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Append the new keys/values and return the full cached tensors."""
        if self.key is not None:
            key = torch.cat([self.key, key], dim=2)
            value = torch.cat([self.value, value], dim=2)
        self.key, self.value = key, value
        return key, value


class CachedSelfAttention(nn.Module):
    """Multi-head self-attention that can read from and write to a :class:`LayerCache`."""

    def __init__(self, hidden_size: int, num_heads: int, attention_type: AttentionType = AttentionType.CAUSAL) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.attention_type = attention_type
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor, cache: Optional[LayerCache] = None) -> torch.Tensor:
        """
        Args:
            hidden_states: Tensor of shape ``(batch, new_tokens, hidden_size)``.
            cache: Optional cache holding the keys/values of the earlier tokens; updated in place.

        Returns:
            Tensor of shape ``(batch, new_tokens, hidden_size)``.
        """
        batch, new_tokens, hidden = hidden_states.shape
        qkv = self.qkv(hidden_states).view(batch, new_tokens, 3, self.num_heads, hidden // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        if cache is not None:
            key, value = cache.update(key, value)
        causal = self.attention_type is AttentionType.CAUSAL
        q_len, kv_len = query.shape[-2], key.shape[-2]
        attn_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(diagonal=kv_len - q_len) if causal else None
        attn_output = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)
        return self.proj(attn_output.transpose(1, 2).reshape(batch, new_tokens, hidden))


class TinyGPT(nn.Module):
    """A two-layer decoder-only language model."""

    def __init__(self, vocab_size: int = 50, hidden_size: int = 32, num_heads: int = 4, num_layers: int = 2, max_positions: int = 64) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, hidden_size)
        self.wpe = nn.Embedding(max_positions, hidden_size)
        self.layers = nn.ModuleList([CachedSelfAttention(hidden_size, num_heads) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, caches: Optional[List[LayerCache]] = None, past_length: int = 0) -> torch.Tensor:
        """Return logits ``(batch, new_tokens, vocab_size)``; ``past_length`` tokens are already cached."""
        positions = torch.arange(past_length, past_length + input_ids.shape[1], device=input_ids.device)
        hidden_states = self.wte(input_ids) + self.wpe(positions)
        for i, layer in enumerate(self.layers):
            hidden_states = hidden_states + layer(hidden_states, caches[i] if caches is not None else None)
        return self.lm_head(self.norm(hidden_states))


@torch.no_grad()
def generate(model: TinyGPT, input_ids: torch.Tensor, max_new_tokens: int, use_cache: bool = True) -> torch.Tensor:
    """Greedy generation.

    Args:
        model: The language model.
        input_ids: Prompt of shape ``(batch, prompt_len)``.
        max_new_tokens: Number of tokens to append.
        use_cache: Feed only the newest token and reuse cached keys/values.

    Returns:
        Tensor of shape ``(batch, prompt_len + max_new_tokens)``.
    """
    caches = [LayerCache() for _ in model.layers] if use_cache else None
    sequence, past_length, step_input = input_ids, 0, input_ids
    for _ in range(max_new_tokens):
        logits = model(step_input, caches, past_length) if use_cache else model(sequence)
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
        past_length += step_input.shape[1]
        sequence = torch.cat([sequence, next_token], dim=1)
        step_input = next_token
    return sequence


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    torch.manual_seed(2)
    model = TinyGPT().eval()
    prompt = torch.randint(0, 50, (2, 6))
    cached = generate(model, prompt, max_new_tokens=8, use_cache=True)
    reference = generate(model, prompt, max_new_tokens=8, use_cache=False)
    logger.info("cached:    %s", cached[:, 6:].tolist())
    logger.info("no cache:  %s", reference[:, 6:].tolist())
    logger.info("identical: %s", torch.equal(cached, reference))


if __name__ == "__main__":
    main()
