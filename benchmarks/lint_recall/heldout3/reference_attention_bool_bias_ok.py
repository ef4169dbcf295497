"""Held-out 3 twin: boolean masks turned into 0 / -inf biases before they meet the scores.

Source: the fixes of huggingface/diffusers PR #14349 (bool mask converted to a -inf/0 bias),
microsoft/onnxscript PR #656 and the SDPA docstring's reference implementation.
"""

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def reference_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False) -> torch.Tensor:
    L, S = query.size(-2), key.size(-2)
    attn_bias = torch.zeros(L, S, dtype=query.dtype, device=query.device)
    if is_causal:
        temp_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril(diagonal=0)
        attn_bias.masked_fill_(temp_mask.logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_bias = attn_bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            attn_bias = attn_bias + attn_mask
    attn_weight = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    attn_weight = attn_weight + attn_bias
    return torch.softmax(attn_weight, dim=-1) @ value


def test_reference_matches_sdpa_with_bool_mask() -> None:
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    keep = torch.rand(6, 6) > 0.3
    keep.fill_diagonal_(True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    expected = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=keep), expected)


class TextToImageAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, 2 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor, context_lens: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q = self.to_q(x).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = self.to_kv(context).view(b, context.size(1), 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn_weight = q @ k.transpose(-2, -1) * (q.size(-1) ** -0.5)
        positions = torch.arange(context.size(1), device=x.device)
        context_keep = (positions[None, :] < context_lens[:, None])[:, None, None, :]
        attn_weight = attn_weight.masked_fill(~context_keep, float("-inf"))
        out = attn_weight.softmax(dim=-1) @ v
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


def add_padding_bias(scores: torch.Tensor, tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    pad = tokens.eq(pad_id)[:, None, None, :]
    scores.masked_fill_(pad, float("-inf"))
    return scores.softmax(-1)
