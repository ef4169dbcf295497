"""MC511 correct twin: each bool mask is in the convention of the API that receives it.

Source: the fix of rasbt/LLMs-from-scratch#1061 (`~mask_bool` / `tril` for SDPA) and the SDPA docstring.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa

CONTEXT = 6
PAD_ID = 0
EMB = 8
N_HEADS = 2
q = k = v = torch.randn(2, 2, CONTEXT, 8)
mask = torch.triu(torch.ones(CONTEXT, CONTEXT), diagonal=1).bool()
out = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)

ids = torch.randint(1, 50, (2, CONTEXT))
ids[0, -2:] = PAD_ID
is_pad = ids == PAD_ID
out2 = sdpa(q, k, v, attn_mask=~is_pad[:, None, None, :])


class GPTBlock(nn.Module):
    def __init__(self, d: int, h: int, ctx: int) -> None:
        super().__init__()
        self.h = h
        self.register_buffer("mask", torch.triu(torch.ones(ctx, ctx), diagonal=1))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n = q.size(-2)
        mask_bool = self.mask.bool()[:n, :n]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~mask_bool, dropout_p=0.0)


mha = nn.MultiheadAttention(EMB, N_HEADS, batch_first=True)
x = torch.randn(2, CONTEXT, EMB)
future = torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), diagonal=1)
y, _ = mha(x, x, x, attn_mask=future, key_padding_mask=is_pad)


def padded_attend(ids: torch.Tensor):
    keep = ids.ne(PAD_ID)[:, None, None, :]

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, keep)

    return run
