"""Held-out 12 (correct twin): lucidrains/x-transformers (x_transformers/attend.py `Attend` with the
`flash` path, x_transformers/x_transformers.py `Attention` building the masks, `AttentionLayers` /
`Encoder`).

Source: the fix of lucidrains/x-transformers#160 (commit 2a5bbdd; the maintainer: "i am keeping with
the convention of `True` for attend, `False` for mask out"): the key mask is no longer inverted, masks are AND-ed, the
einsum path fills `~mask`, the flash path removes the causal triangle with `& ~causal_mask` and
hands SDPA a True = attend mask.
"""

from functools import reduce

import torch
import torch.nn.functional as F
from torch import einsum, nn


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def and_reduce(masks):
    return reduce(lambda a, b: a & b, masks)


class Attend(nn.Module):
    def __init__(self, *, dropout=0., causal=False, scale=None, flash=False):
        super().__init__()
        self.scale = scale
        self.causal = causal
        self.attn_fn = F.softmax
        self.dropout = dropout
        self.attn_dropout = nn.Dropout(dropout)
        self.flash = flash

    def get_mask(self, i, j, device):
        return torch.ones((i, j), device=device, dtype=torch.bool).triu(j - i + 1)

    def flash_attn(self, q, k, v, mask=None, attn_bias=None):
        batch, heads, q_len, _, k_len, device = *q.shape, k.shape[-2], q.device

        causal = self.causal

        if exists(mask):
            assert mask.ndim == 4
            mask = mask.expand(batch, heads, q_len, k_len)

            # manually handle causal mask, if another mask was given

            if causal:
                causal_mask = self.get_mask(q_len, k_len, device)
                mask = mask & ~causal_mask
                causal = False

        out = F.scaled_dot_product_attention(
            q, k, v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.,
            is_causal=causal
        )
        return out

    def forward(self, q, k, v, mask=None, attn_bias=None):
        n, device = q.shape[-2], q.device
        scale = default(self.scale, q.shape[-1] ** -0.5)

        if self.flash:
            return self.flash_attn(q, k, v, mask=mask, attn_bias=attn_bias)

        dots = einsum('b h i d, b h j d -> b h i j', q, k) * scale

        if exists(attn_bias):
            dots = dots + attn_bias

        mask_value = -torch.finfo(dots.dtype).max

        if exists(mask):
            dots = dots.masked_fill(~mask, mask_value)

        if self.causal:
            i, j = dots.shape[-2:]
            causal_mask = self.get_mask(i, j, device)
            dots = dots.masked_fill(causal_mask, mask_value)

        attn = self.attn_fn(dots, dim=-1)
        attn = self.attn_dropout(attn)
        return einsum('b h i j, b h j d -> b h i d', attn, v)


class Attention(nn.Module):
    def __init__(self, dim, dim_head=16, heads=4, causal=False, dropout=0., attn_flash=False):
        super().__init__()
        self.heads = heads
        inner_dim = dim_head * heads
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_k = nn.Linear(dim, inner_dim, bias=False)
        self.to_v = nn.Linear(dim, inner_dim, bias=False)
        self.attend = Attend(causal=causal, dropout=dropout, flash=attn_flash)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x, context=None, mask=None, context_mask=None):
        b, n, _ = x.shape
        h = self.heads
        has_context = exists(context)
        kv_input = default(context, x)

        q, k, v = self.to_q(x), self.to_k(kv_input), self.to_v(kv_input)
        q, k, v = (t.view(b, -1, h, t.shape[-1] // h).transpose(1, 2) for t in (q, k, v))

        masks = []
        input_mask = context_mask if has_context else mask

        if exists(input_mask):
            input_mask = input_mask[:, None, None, :]  # b j -> b 1 1 j
            masks.append(input_mask)

        final_attn_mask = None
        if len(masks) > 0:
            final_attn_mask = and_reduce(masks)

        out = self.attend(q, k, v, mask=final_attn_mask)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Encoder(nn.Module):
    def __init__(self, dim, depth, heads=4, **kwargs):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                nn.LayerNorm(dim),
                Attention(dim, heads=heads, **kwargs),
                nn.LayerNorm(dim),
                nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim)),
            ]))

    def forward(self, x, mask=None):
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x), mask=mask)
            x = x + ff(norm2(x))
        return x


class TransformerWrapper(nn.Module):
    def __init__(self, *, num_tokens, max_seq_len, attn_layers):
        super().__init__()
        dim = attn_layers.layers[0][0].normalized_shape[0]
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.attn_layers = attn_layers
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x, mask=None):
        pos = torch.arange(x.shape[1], device=x.device)
        x = self.token_emb(x) + self.pos_emb(pos)
        x = self.attn_layers(x, mask=mask)
        return self.to_logits(self.norm(x))


def build_model(attn_flash=True):
    return TransformerWrapper(
        num_tokens=64,
        max_seq_len=32,
        attn_layers=Encoder(dim=32, depth=2, heads=4, attn_flash=attn_flash),
    )
