"""MC511: a bool mask in MultiheadAttention's convention (True = masked) given to SDPA (True =
keep), or an SDPA keep mask given to MultiheadAttention: the mask is inverted.

Source: rasbt/LLMs-from-scratch#1061 (`torch.triu(...).bool()` handed to SDPA: the causal model
sees the future), the torch 2.13 SDPA docstring's note on inverting MHA masks, conventions.md 1.
Surroundings: top of file, after other code, a method, a closure, an alias, a self-assignment.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa

CONTEXT = 6
q = k = v = torch.randn(2, 2, CONTEXT, 8)
mask = torch.triu(torch.ones(CONTEXT, CONTEXT), diagonal=1).bool()
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # expect: MC511|MC521 top

PAD_ID = 0
EMB = 8
N_HEADS = 2


def tokens(batch: int, n: int) -> torch.Tensor:
    return torch.randint(1, 50, (batch, n))


class Spec:
    emb = EMB
    heads = N_HEADS


ids = tokens(2, CONTEXT)
ids[0, -2:] = PAD_ID
is_pad = ids == PAD_ID
out2 = sdpa(q, k, v, attn_mask=is_pad[:, None, None, :])  # expect: MC511 alias


class GPTBlock(nn.Module):
    def __init__(self, d: int, h: int, ctx: int) -> None:
        super().__init__()
        self.h = h
        self.register_buffer("mask", torch.triu(torch.ones(ctx, ctx), diagonal=1))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n = q.size(-2)
        mask_bool = self.mask.bool()[:n, :n]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_bool, dropout_p=0.0)  # expect: MC511|MC521 method


mha = nn.MultiheadAttention(EMB, N_HEADS, batch_first=True)
x = torch.randn(2, CONTEXT, EMB)
keep_causal = torch.tril(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool))
y, _ = mha(x, x, x, attn_mask=keep_causal)  # expect: MC511|MC521 after-code


def padded_attend(ids: torch.Tensor):
    pad = ids.eq(PAD_ID)
    pad = pad[:, None, None, :]

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, pad)  # expect: MC511 closure

    return run
