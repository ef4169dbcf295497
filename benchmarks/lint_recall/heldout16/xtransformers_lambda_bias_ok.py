"""Held-out 16 (correct twin): an x-transformers-style encoder (lucidrains): `exists` / `default` helpers, an
`Attend` module with a `flash` switch, ALiBi positional bias (`AlibiPositionalBias`), pre-norm
`Attention` / `FeedForward` layers and a `TransformerWrapper` with a bool padding `mask`
(True = keep, x-transformers' convention). With ALiBi on the flash path, the padding mask is folded
into the float bias by a module-level lambda, `mask_to_bias`, defined next to the helpers.

Source: cerebroai/reformers#3 ("`(1-tf.cast(mask, tf.float32)) * float('-inf')` ... causes nan
output. Changed to * -1e9 has fixed it"). The lambda multiplies the inverted 0/1 mask by -inf,
so every kept position of the bias is 0 * -inf = NaN (IEEE 754).
Twin: `mask_to_bias = lambda mask: torch.where(mask, 0.0, float("-inf"))` (0 where kept, -inf where padded).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


mask_to_bias = lambda mask: torch.where(mask, 0.0, float("-inf"))


class AlibiPositionalBias(nn.Module):
    def __init__(self, heads: int):
        super().__init__()
        start = 2 ** (-(2 ** -(math.log2(heads) - 3)))
        self.register_buffer("slopes", torch.tensor([start * start ** i for i in range(heads)])[:, None, None], persistent=False)

    def forward(self, i: int, j: int) -> torch.Tensor:
        seq_arange = torch.arange(j - i, j, device=self.slopes.device)
        context_arange = torch.arange(j, device=self.slopes.device)
        return -(context_arange[None, :] - seq_arange[:, None]).abs() * self.slopes  # (h, i, j)


class Attend(nn.Module):
    def __init__(self, dropout: float = 0.0, flash: bool = True):
        super().__init__()
        self.dropout, self.flash = dropout, flash

    def forward(self, q, k, v, mask=None, attn_bias=None):
        if self.flash:
            if exists(attn_bias):
                attn_bias = attn_bias.expand(q.shape[0], -1, -1, -1)
                mask = attn_bias + (mask_to_bias(mask[:, None, None, :]) if exists(mask) else 0.0)
            elif exists(mask):
                mask = mask[:, None, None, :]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        sim = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if exists(attn_bias):
            sim = sim + attn_bias
        if exists(mask):
            sim = sim.masked_fill(~mask[:, None, None, :], -torch.finfo(sim.dtype).max)
        return F.dropout(sim.softmax(dim=-1), self.dropout, self.training) @ v


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int = 4, dim_head: int = 16, flash: bool = True):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, heads * dim_head, bias=False)
        self.to_kv = nn.Linear(dim, 2 * heads * dim_head, bias=False)
        self.attend = Attend(flash=flash)
        self.to_out = nn.Linear(heads * dim_head, dim, bias=False)

    def forward(self, x, mask=None, attn_bias=None):
        b, n, _ = x.shape
        q, k, v = (self.to_q(x), *self.to_kv(x).chunk(2, dim=-1))
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        out = self.attend(q, k, v, mask=mask, attn_bias=attn_bias)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, mult: int = 4):
        super().__init__(nn.Linear(dim, dim * mult), nn.GELU(), nn.Linear(dim * mult, dim))


class TransformerWrapper(nn.Module):
    def __init__(self, num_tokens: int, dim: int = 64, depth: int = 2, heads: int = 4, alibi_pos_bias: bool = True,
                 attn_flash: bool = True):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.alibi = AlibiPositionalBias(heads) if alibi_pos_bias else None
        self.layers = nn.ModuleList([nn.ModuleList([nn.LayerNorm(dim), Attention(dim, heads, flash=attn_flash),
                                                    nn.LayerNorm(dim), FeedForward(dim)]) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x, mask=None, return_embeddings: bool = False):
        n = x.shape[1]
        x = self.token_emb(x)
        attn_bias = self.alibi(n, n)[None] if exists(self.alibi) else None
        for attn_norm, attn, ff_norm, ff in self.layers:
            x = x + attn(attn_norm(x), mask=mask, attn_bias=attn_bias)
            x = x + ff(ff_norm(x))
        x = self.norm(x)
        return x if return_embeddings else self.to_logits(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerWrapper(num_tokens=50).eval()
    tokens = torch.randint(0, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    with torch.no_grad():
        logits = model(tokens, mask=mask)
        alone = model(tokens[1:, :6])
        print("logits finite:", bool(torch.isfinite(logits).all()))
        print("padded sequence vs alone:", float((logits[1, :6] - alone[0]).abs().max()))
