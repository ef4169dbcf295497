"""MC510 correct twin: is_causal only when the query covers the whole key range; a lower-right
causal bias or no causal flag for cached decoding.

Source: the fixes in open-lm-engine/lm-engine PR #498 (`is_causal=self.causal and q.size(1) == k.size(1)`)
and pytorch/pytorch#144858 (`torch.tril(ones(w, w))[-h:, :]`).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right


class CachedAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        mask = causal_lower_right(q.size(-2), k.size(-2))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def prefill(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def step(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=q.size(2) == k.size(2))


def decode_loop(q_step: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor):
    def one(k_new: torch.Tensor, v_new: torch.Tensor) -> torch.Tensor:
        keys = torch.cat((past_k, k_new), dim=-2)
        values = torch.cat((past_v, v_new), dim=-2)
        w, h = keys.size(-2), q_step.size(-2)
        keep = torch.tril(torch.ones(w, w, dtype=torch.bool))[-h:, :]
        return F.scaled_dot_product_attention(q_step, keys, values, attn_mask=keep)

    return one
