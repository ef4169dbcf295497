"""MC506: scaled_dot_product_attention given both attn_mask and is_causal=True.

Source: pytorch/pytorch#131254 (mask has no effect with is_causal=True) and the torch 2.13 facts in
conventions.md section 2.7 (MATH raises "Explicit attn_mask should not be set when is_causal=True";
the CPU flash kernel silently ANDs both).
Surroundings: top of file, after other code, a method with a positional is_causal, an alias
(`attend = F.scaled_dot_product_attention`), a closure, a named constant.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

q = k = v = torch.randn(1, 2, 4, 8)
pad = torch.tensor([True, True, True, False])
out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad, is_causal=True)  # expect: MC506 top

CAUSAL = True
DIM = 8
HEADS = 2
attend = F.scaled_dot_product_attention


def split_heads(t: torch.Tensor, h: int) -> torch.Tensor:
    b, n, d = t.shape
    return t.view(b, n, h, d // h).transpose(1, 2)


class Sizes:
    dim = DIM
    heads = HEADS


x = torch.randn(1, 4, DIM)
qh = split_heads(x, HEADS)
y = attend(qh, qh, qh, pad, 0.0, CAUSAL)  # expect: MC506 alias


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x: torch.Tensor, key_keep: torch.Tensor) -> torch.Tensor:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        mask = key_keep[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, mask, 0.0, True)  # expect: MC506 positional


def decoder_step(keep: torch.Tensor):
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=CAUSAL)  # expect: MC506 closure

    return step
