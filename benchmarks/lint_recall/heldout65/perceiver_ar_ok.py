"""
Perceiver AR (Hawthorne et al., 2022): the last `num_latents` positions of a
long context cross-attend, causally, to the whole prefix, and the rest of the
network is a causal transformer over those latents only. Prompts of different
lengths are left-padded so that the latents line up with the newest tokens.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); huggingface/transformers#32195 (conventions.md §3 item 25); conventions.md §2.9, §5 item 7
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn, einsum, Tensor


def exists(val):
    return val is not None


def max_neg_value(t: Tensor) -> float:
    return -torch.finfo(t.dtype).max


def FeedForward(dim, mult=4, dropout=0.):
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult, bias=False), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim * mult, dim, bias=False))


class CausalAttention(nn.Module):
    def __init__(self, *, dim, dim_head=64, heads=8, dropout=0.):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        inner_dim = heads * dim_head
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        b, n, _ = x.shape
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: t.view(b, n, self.heads, -1).transpose(1, 2), (q, k, v))

        attn_mask = torch.ones((n, n), device=x.device, dtype=torch.bool).tril()
        if exists(mask):
            attn_mask = attn_mask & mask[:, None, None, :]

        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class CausalPrefixAttention(nn.Module):
    def __init__(self, *, dim, dim_head=64, heads=8, max_heads_process=2, dropout=0.):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.max_heads_process = max_heads_process
        inner_dim = heads * dim_head
        self.norm = nn.LayerNorm(dim)
        self.context_norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def forward(self, x: Tensor, context: Tensor, attn_bias: Tensor) -> Tensor:
        b, m, _ = x.shape
        q = self.to_q(self.norm(x))
        k, v = self.to_kv(self.context_norm(context)).chunk(2, dim=-1)
        q, k, v = map(lambda t: t.view(b, t.shape[1], self.heads, -1).transpose(1, 2), (q, k, v))

        outs = []
        for q_chunk, k_chunk, v_chunk in zip(*(t.split(self.max_heads_process, dim=1) for t in (q, k, v))):
            sim = einsum('b h i d, b h j d -> b h i j', q_chunk * self.scale, k_chunk)
            sim = sim + attn_bias
            attn = self.dropout(sim.softmax(dim=-1))
            outs.append(einsum('b h i j, b h j d -> b h i d', attn, v_chunk))

        out = torch.cat(outs, dim=1)
        return self.to_out(out.transpose(1, 2).reshape(b, m, -1))


class PerceiverAR(nn.Module):
    def __init__(self, *, num_tokens, dim, depth, max_seq_len, num_latents, heads=4, dim_head=16, ff_mult=4, pad_id=0, dropout=0.):
        super().__init__()
        assert num_latents <= max_seq_len
        self.num_latents = num_latents
        self.pad_id = pad_id
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)

        self.cross_attn = CausalPrefixAttention(dim=dim, dim_head=dim_head, heads=heads, dropout=dropout)
        self.cross_ff = FeedForward(dim, ff_mult, dropout)
        self.layers = nn.ModuleList([
            nn.ModuleList([CausalAttention(dim=dim, dim_head=dim_head, heads=heads, dropout=dropout), FeedForward(dim, ff_mult, dropout)])
            for _ in range(depth)
        ])
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens, bias=False))

    def forward(self, x: Tensor, labels: Optional[Tensor] = None):
        b, n = x.shape
        m = self.num_latents
        device = x.device

        keep = x != self.pad_id
        position = (keep.long().cumsum(dim=-1) - 1).clamp(min=0)
        h = self.token_emb(x) + self.pos_emb(position)
        latents = h[:, -m:]

        causal = torch.ones((m, n), device=device, dtype=torch.bool).triu(n - m + 1)
        attn_bias = torch.zeros((m, n), device=device).masked_fill(causal, max_neg_value(h))
        attn_bias = attn_bias.masked_fill(~keep[:, None, None, :], max_neg_value(h))

        latents = self.cross_attn(latents, h, attn_bias=attn_bias) + latents
        latents = self.cross_ff(latents) + latents

        for attn, ff in self.layers:
            latents = attn(latents, mask=keep[:, -m:]) + latents
            latents = ff(latents) + latents

        logits = self.to_logits(latents)
        if not exists(labels):
            return logits
        return F.cross_entropy(logits.transpose(1, 2), labels[:, -m:], ignore_index=self.pad_id)


def left_pad(seqs, pad_id=0):
    max_len = max(len(seq) for seq in seqs)
    return torch.tensor([[pad_id] * (max_len - len(seq)) + list(seq) for seq in seqs])


@torch.no_grad()
def generate(model, prompts, steps):
    out = prompts
    for _ in range(steps):
        logits = model(out)[:, -1]
        logits[:, model.pad_id] = float('-inf')
        out = torch.cat((out, logits.argmax(dim=-1, keepdim=True)), dim=-1)
    return out[:, prompts.shape[1]:]


if __name__ == '__main__':
    torch.manual_seed(0)
    model = PerceiverAR(num_tokens=50, dim=32, depth=2, max_seq_len=32, num_latents=4)
    seqs = left_pad([torch.randint(1, 50, (17,)).tolist(), torch.randint(1, 50, (11,)).tolist()])
    loss = model(seqs[:, :-1], labels=seqs[:, 1:])
    loss.backward()
    model.eval()
    sampled = generate(model, seqs[:, :8], steps=3)
    print('loss', round(loss.item(), 4), 'sampled', sampled.tolist())
