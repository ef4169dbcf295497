"""Held-out 2: a boolean attention mask added to the eager attention scores.

Source: huggingface/pytorch-image-models PR #2674 (`maybe_add_mask` adds a bool mask built with
`torch.ones(..., dtype=torch.bool).tril()` to the scores) and huggingface/transformers PR #41443
(Qwen3 `eager_attention_forward` adds a boolean attention_mask: "completely wrong logits").
"""

import torch
import torch.nn as nn


def maybe_add_mask(scores: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    return scores if attn_mask is None else scores + attn_mask


def demo() -> None:
    scores = torch.rand(3, 4)
    bool_mask = torch.ones(3, 4, dtype=torch.bool).tril(diagonal=0)
    print(maybe_add_mask(scores, bool_mask))
    attn = scores + bool_mask  # expect: MC509 function


class Qwen3Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.scaling = self.head_dim**-0.5
        self.qkv = nn.Linear(hidden, 3 * hidden)

    def forward(self, hidden_states: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        b, n, _ = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        attn_weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        causal_mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        attention_mask = causal_mask[None, None] & (padding[:, None, None, :] != 0)
        attn_weights = attn_weights + attention_mask  # expect: MC509 method
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)
        return torch.matmul(attn_weights.to(q.dtype), v).transpose(1, 2).reshape(b, n, -1)
