"""
MEGABYTE: a global patch transformer and a local byte transformer for
million-byte sequences (Yu et al., 2023), at toy scale. Multi-query attention
and rotary embeddings in both models, bytes padded to a whole number of patches.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask); pytorch/pytorch#103749 (conventions.md §3 item 5); conventions.md §2.3
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn, einsum, Tensor


def exists(val):
    return val is not None


def cast_tuple(t, length=1):
    return t if isinstance(t, tuple) else ((t,) * length)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000):
        super().__init__()
        inv_freq = 1. / (theta ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer('inv_freq', inv_freq, persistent=False)

    def forward(self, seq_len: int, device: torch.device) -> Tensor:
        t = torch.arange(seq_len, device=device).type_as(self.inv_freq)
        freqs = einsum('i , j -> i j', t, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(pos, t):
    return t * pos.cos() + rotate_half(t) * pos.sin()


def FeedForward(*, dim, mult=4, dropout=0.):
    return nn.Sequential(
        RMSNorm(dim),
        nn.Linear(dim, dim * mult),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(dim * mult, dim)
    )


class Attention(nn.Module):
    def __init__(self, *, dim, dim_head=64, heads=8, dropout=0.):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        inner_dim = dim_head * heads
        self.norm = RMSNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, dim_head * 2, bias=False)
        self.attn_dropout = nn.Dropout(dropout)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x: Tensor, rotary_emb: Optional[Tensor] = None, causal_mask: Optional[Tensor] = None) -> Tensor:
        b, n, _ = x.shape
        x = self.norm(x)
        q, k, v = self.to_q(x), *self.to_kv(x).chunk(2, dim=-1)
        q = q.view(b, n, self.heads, -1).transpose(1, 2) * self.scale

        if exists(rotary_emb):
            q, k = map(lambda t: apply_rotary_pos_emb(rotary_emb, t), (q, k))

        sim = einsum('b h i d, b j d -> b h i j', q, k)
        if exists(causal_mask):
            sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)

        attn = self.attn_dropout(sim.softmax(dim=-1))
        out = einsum('b h i j, b j d -> b h i d', attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class Transformer(nn.Module):
    def __init__(self, *, dim, layers, dim_head=64, heads=8, attn_dropout=0., ff_dropout=0., ff_mult=4, rel_pos=True):
        super().__init__()
        self.rotary_emb = RotaryEmbedding(dim_head) if rel_pos else None
        self.layers = nn.ModuleList([
            nn.ModuleList([
                Attention(dim=dim, dim_head=dim_head, heads=heads, dropout=attn_dropout),
                FeedForward(dim=dim, mult=ff_mult, dropout=ff_dropout)
            ]) for _ in range(layers)
        ])
        self.norm = RMSNorm(dim)

    def forward(self, x):
        n, device = x.shape[-2], x.device
        rotary_emb = self.rotary_emb(n, device) if exists(self.rotary_emb) else None
        causal_mask = torch.ones((n, n), device=device, dtype=torch.bool).triu(1)

        for attn, ff in self.layers:
            x = attn(x, rotary_emb=rotary_emb, causal_mask=causal_mask) + x
            x = ff(x) + x
        return self.norm(x)


class MEGABYTE(nn.Module):
    def __init__(
        self,
        *,
        num_tokens: int,
        dim: Tuple[int, int],
        depth: Tuple[int, int],
        patch_size: int,
        dim_head: int = 32,
        heads: int = 4,
        attn_dropout: float = 0.,
        ff_dropout: float = 0.,
        pad_id: int = 0
    ):
        super().__init__()
        dim_global, dim_local = cast_tuple(dim, 2)
        depth_global, depth_local = cast_tuple(depth, 2)
        self.patch_size = patch_size
        self.pad_id = pad_id

        self.token_emb = nn.Embedding(num_tokens, dim_local)
        self.global_start = nn.Parameter(torch.randn(dim_global))
        self.local_start = nn.Parameter(torch.randn(dim_local))

        self.to_patch = nn.Sequential(RMSNorm(dim_local * patch_size), nn.Linear(dim_local * patch_size, dim_global))
        self.global_transformer = Transformer(dim=dim_global, layers=depth_global, dim_head=dim_head, heads=heads, attn_dropout=attn_dropout, ff_dropout=ff_dropout)
        self.global_to_local = nn.Linear(dim_global, dim_local * patch_size)
        self.local_transformer = Transformer(dim=dim_local, layers=depth_local, dim_head=dim_head, heads=heads, attn_dropout=attn_dropout, ff_dropout=ff_dropout)
        self.to_logits = nn.Linear(dim_local, num_tokens)

    def forward(self, ids: Tensor, return_loss: bool = False):
        b, n = ids.shape
        p = self.patch_size
        ids = F.pad(ids, (0, (-n) % p), value=self.pad_id)
        m = ids.shape[-1] // p

        tokens = self.token_emb(ids)
        d = tokens.shape[-1]

        global_in = self.to_patch(tokens.reshape(b, m, p * d))
        global_in = torch.cat((self.global_start.expand(b, 1, -1), global_in[:, :-1]), dim=1)
        global_out = self.global_transformer(global_in)

        local_in = tokens.reshape(b * m, p, d)
        local_in = torch.cat((self.local_start.expand(b * m, 1, -1), local_in[:, :-1]), dim=1)
        local_in = local_in + self.global_to_local(global_out).reshape(b * m, p, d)
        logits = self.to_logits(self.local_transformer(local_in)).reshape(b, m * p, -1)

        if not return_loss:
            return logits[:, :n]
        return F.cross_entropy(logits.transpose(1, 2), ids, ignore_index=self.pad_id)


def encode_bytes(texts, pad_id=0):
    seqs = [torch.tensor(list(text.encode('utf-8')), dtype=torch.long) + 1 for text in texts]
    return nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad_id)


if __name__ == '__main__':
    torch.manual_seed(0)
    model = MEGABYTE(num_tokens=257, dim=(64, 32), depth=(2, 2), patch_size=4, dim_head=16, heads=2)
    ids = encode_bytes(['hello megabyte', 'bytes all the way'])
    loss = model(ids, return_loss=True)
    loss.backward()
    with torch.no_grad():
        logits = model(ids[:1, :9])
    print('loss', round(loss.item(), 4), 'logits', tuple(logits.shape), 'finite', bool(logits.isfinite().all()))
