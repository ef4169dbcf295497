"""Held-out 2 (fixed twin): a boolean mask turned into 0 / -inf before it meets the scores.

Source: the fix of huggingface/pytorch-image-models PR #2674 and of huggingface/transformers
PR #41443 (convert the bool mask to float with -inf where False).
"""

import torch
import torch.nn as nn


def maybe_add_mask(scores: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    if attn_mask is None:
        return scores
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, float("-inf"))
    return scores + attn_mask


def demo() -> None:
    scores = torch.rand(3, 4)
    bool_mask = torch.ones(3, 4, dtype=torch.bool).tril(diagonal=0)
    print(maybe_add_mask(scores, bool_mask))
    attn = scores.masked_fill(~bool_mask, float("-inf"))


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
        attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)
        return torch.matmul(attn_weights.to(q.dtype), v).transpose(1, 2).reshape(b, n, -1)
