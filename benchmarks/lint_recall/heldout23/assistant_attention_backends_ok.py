"""Pluggable attention backends for a small decoder, as a coding assistant writes them.

Fully type-hinted, Google-style docstrings, an ``AttentionBackend`` enum that selects the
attention function from a registry, one mask builder shared by every backend, and logging.

Source: conventions.md section 2.9 and section 5 item 7 (a 4-D bool keep-mask reaching eager
attention, which does `attn_weights + attention_mask`: True adds +1 and masks nothing), the HF
4-D masks row of section 1, huggingface/transformers#46458.
"""
from __future__ import annotations

import logging
import math
from enum import Enum
from typing import Callable, Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class AttentionBackend(str, Enum):
    """Available attention implementations."""

    EAGER = "eager"
    SDPA = "sdpa"


def build_attention_mask(attention_mask: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Build the 4-D attention mask shared by all backends.

    Args:
        attention_mask: Tensor of shape ``(batch, seq_len)`` with 1 for real tokens and 0 for padding.
        causal: If True, also prevent each position from attending to later positions.

    Returns:
        Boolean tensor of shape ``(batch, 1, seq_len, seq_len)`` where True means "may attend".
    """
    seq_len = attention_mask.shape[-1]
    mask = attention_mask.bool()[:, None, None, :]
    if causal:
        mask = mask & torch.ones(seq_len, seq_len, dtype=torch.bool, device=attention_mask.device).tril()
    return mask


def eager_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Reference attention implemented with explicit matrix products.

    Args:
        query: Tensor of shape ``(batch, heads, seq_len, head_dim)``.
        key: Tensor of shape ``(batch, heads, seq_len, head_dim)``.
        value: Tensor of shape ``(batch, heads, seq_len, head_dim)``.
        mask: Optional mask from :func:`build_attention_mask`.

    Returns:
        Tensor of shape ``(batch, heads, seq_len, head_dim)``.
    """
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    return scores.softmax(dim=-1) @ value


def sdpa_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Fused attention through :func:`torch.nn.functional.scaled_dot_product_attention`."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


ATTENTION_FUNCTIONS: Dict[AttentionBackend, Callable[..., torch.Tensor]] = {
    AttentionBackend.EAGER: eager_attention,
    AttentionBackend.SDPA: sdpa_attention,
}


class SelfAttention(nn.Module):
    """Multi-head self-attention whose kernel is chosen by ``backend``."""

    def __init__(self, hidden_size: int, num_heads: int, backend: AttentionBackend = AttentionBackend.SDPA) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.backend = AttentionBackend(backend)
        self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, seq_len, hidden = hidden_states.shape
        qkv = self.qkv_proj(hidden_states).view(batch, seq_len, 3, self.num_heads, hidden // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        attn_output = ATTENTION_FUNCTIONS[self.backend](query, key, value, mask)
        return self.out_proj(attn_output.transpose(1, 2).reshape(batch, seq_len, hidden))


class TinyDecoder(nn.Module):
    """A minimal causal language model used to compare attention backends."""

    def __init__(self, vocab_size: int = 100, hidden_size: int = 32, num_heads: int = 4,
                 num_layers: int = 2, backend: AttentionBackend = AttentionBackend.SDPA) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList([SelfAttention(hidden_size, num_heads, backend) for _ in range(num_layers)])
        self.lm_head = nn.Linear(hidden_size, vocab_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Return logits of shape ``(batch, seq_len, vocab_size)``."""
        mask = build_attention_mask(attention_mask, causal=True)
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = hidden_states + layer(hidden_states, mask)
        return self.lm_head(hidden_states)


def main() -> None:
    """Check that both backends agree on the real tokens of a right-padded batch."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    torch.manual_seed(0)
    input_ids = torch.randint(1, 100, (2, 7))
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])
    models = {backend: TinyDecoder(backend=backend).eval() for backend in AttentionBackend}
    models[AttentionBackend.EAGER].load_state_dict(models[AttentionBackend.SDPA].state_dict())
    with torch.no_grad():
        logits = {backend: model(input_ids, attention_mask) for backend, model in models.items()}
    real = attention_mask.bool()
    diff = (logits[AttentionBackend.EAGER] - logits[AttentionBackend.SDPA])[real].abs().max().item()
    logger.info("eager vs sdpa on real tokens: max |diff| = %.3g (expect ~1e-6)", diff)


if __name__ == "__main__":
    main()
