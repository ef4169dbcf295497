"""Held-out 3: boolean masks added to attention scores as if they were additive biases, in a
reference attention used to test fused kernels and in a text-to-image attention block.

Source: huggingface/diffusers#14342 and PR #14349 (a `torch.bool` attn_mask "consumed as an
additive 0/1 bias": masked positions get +0.0 and kept ones +1.0), microsoft/onnxscript#580 and
PR #656 ("the logic for the dot attention when mask is bool is incorrect"; the mask must be cast
first), mlverse/torch PR #1208 (float masks are added, boolean masks fill with -inf).
Surroundings: a reference implementation's body, its test, an augmented add in forward,
an in-place `add_` in a helper.
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
    attn_weight = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    attn_weight = attn_weight + attn_bias
    if attn_mask is not None:
        attn_weight = attn_weight + attn_mask
    return torch.softmax(attn_weight, dim=-1) @ value


def test_reference_matches_sdpa_with_bool_mask() -> None:
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    keep = torch.rand(6, 6) > 0.3
    keep.fill_diagonal_(True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    expected = torch.softmax(scores + keep, dim=-1) @ v  # expect: MC509 test
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
        attn_weight += context_keep  # expect: MC509 augmented
        out = attn_weight.softmax(dim=-1) @ v
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


def add_padding_bias(scores: torch.Tensor, tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    pad = tokens.eq(pad_id)[:, None, None, :]
    scores.add_(pad)  # expect: MC509 inplace
    return scores.softmax(-1)
