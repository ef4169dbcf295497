"""
RETRO (Borgeaud et al., 2022) at toy scale: a frozen chunk embedder indexes a
token database, every chunk of a training sequence retrieves its nearest
database chunks (with their continuations), a bidirectional encoder reads the
neighbours and the decoder attends to them through chunked cross-attention.

Source: conventions.md §2.6 (an (N, S) padding mask given to SDPA), §5 item 6, §1 (SDPA row: masks broadcast from the right)
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn, Tensor


def exists(val):
    return val is not None


def split_heads(t: Tensor, heads: int) -> Tensor:
    return t.unflatten(-1, (heads, -1)).transpose(1, 2)


def merge_heads(t: Tensor) -> Tensor:
    return t.transpose(1, 2).flatten(2)


class ChunkEmbedder(nn.Module):
    def __init__(self, num_tokens, dim=32, depth=2, heads=2, max_len=16):
        super().__init__()
        self.heads = heads
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList([nn.ModuleList([
            nn.LayerNorm(dim), nn.Linear(dim, dim * 3, bias=False), nn.Linear(dim, dim),
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
        ]) for _ in range(depth)])

    @torch.no_grad()
    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        x = self.token_emb(input_ids) + self.pos_emb(torch.arange(input_ids.shape[1], device=input_ids.device))
        for norm, to_qkv, to_out, ff in self.layers:
            q, k, v = map(lambda t: split_heads(t, self.heads), to_qkv(norm(x)).chunk(3, dim=-1))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask.bool()[:, None, None, :] if exists(attention_mask) else None)
            x = to_out(merge_heads(out)) + x
            x = ff(x) + x
        if not exists(attention_mask):
            return F.normalize(x.mean(dim=1), dim=-1)
        weights = attention_mask[..., None].float()
        return F.normalize((x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.), dim=-1)


class ChunkIndex:
    def __init__(self, embedder: ChunkEmbedder, token_stream: Tensor, chunk_size: int):
        self.embedder, self.chunk_size = embedder, chunk_size
        windows = token_stream.unfold(0, chunk_size * 2, chunk_size)
        self.neighbour_tokens = windows
        self.keys = embedder(windows[:, :chunk_size])

    def search(self, query_embeds: Tensor, num_neighbours: int) -> Tensor:
        scores = query_embeds @ self.keys.t()
        indices = scores.topk(num_neighbours, dim=-1).indices
        return self.neighbour_tokens[indices]

    def retrieve_for_sequences(self, seqs: Tensor, num_neighbours: int) -> Tensor:
        b, n = seqs.shape
        chunks = seqs.reshape(b * (n // self.chunk_size), self.chunk_size)
        neighbours = self.search(self.embedder(chunks), num_neighbours)
        return neighbours.reshape(b, n // self.chunk_size, num_neighbours, -1)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, causal=False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, dim * 2, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, context=None, mask=None):
        x = self.norm(x)
        context = context if exists(context) else x
        q, k, v = map(lambda t: split_heads(t, self.heads), (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1)))
        attn_mask = mask[:, None, None, :] if exists(mask) else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=self.causal and not exists(mask))
        return self.to_out(merge_heads(out))


def FeedForward(dim, mult=4):
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult), nn.GELU(), nn.Linear(dim * mult, dim))


class RETRO(nn.Module):
    def __init__(self, *, num_tokens, dim=32, dec_depth=2, enc_depth=1, heads=4, chunk_size=8, max_seq_len=64, cross_attn_layers=(2,), pad_id=0):
        super().__init__()
        self.chunk_size, self.pad_id = chunk_size, pad_id
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.encoder = nn.ModuleList([nn.ModuleList([Attention(dim, heads), FeedForward(dim)]) for _ in range(enc_depth)])
        self.decoder = nn.ModuleList([nn.ModuleList([
            Attention(dim, heads, causal=True),
            Attention(dim, heads) if layer in cross_attn_layers else None,
            FeedForward(dim)
        ]) for layer in range(1, dec_depth + 1)])
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens))

    def encode_neighbours(self, neighbours: Tensor):
        b, k, r, n = neighbours.shape
        tokens = neighbours.reshape(b * k * r, n)
        keep = tokens != self.pad_id
        h = self.token_emb(tokens) + self.pos_emb(torch.arange(n, device=tokens.device))
        for attn, ff in self.encoder:
            h = attn(h, mask=keep) + h
            h = ff(h) + h
        return h.reshape(b, k, r * n, -1), keep.reshape(b, k, r * n)

    def forward(self, seq: Tensor, neighbours: Tensor, return_loss: bool = False):
        if return_loss:
            seq, labels = seq[:, :-1], seq[:, 1:]
        b, n = seq.shape
        m = self.chunk_size
        num_chunks = -(-n // m)

        context, context_keep = self.encode_neighbours(neighbours[:, :num_chunks])
        context = F.pad(context[:, :-1], (0, 0, 0, 0, 1, 0))
        context_keep = F.pad(context_keep[:, :-1], (0, 0, 1, 0), value=False)
        has_context = context_keep.any(dim=-1)

        h = self.token_emb(seq) + self.pos_emb(torch.arange(n, device=seq.device))
        for attn, cross_attn, ff in self.decoder:
            h = attn(h) + h
            if exists(cross_attn):
                chunked = F.pad(h, (0, 0, 0, num_chunks * m - n)).reshape(b * num_chunks, m, -1)
                out = cross_attn(chunked, context=context.flatten(0, 1), mask=context_keep.flatten(0, 1))
                out = out * has_context.flatten(0, 1)[:, None, None]
                h = out.reshape(b, num_chunks * m, -1)[:, :n] + h
            h = ff(h) + h

        logits = self.to_logits(h)
        if not return_loss:
            return logits
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=self.pad_id)


def encode_text(text: str, length: int, num_tokens: int = 64, pad_id: int = 0):
    ids = [1 + ord(c) % (num_tokens - 1) for c in text][:length]
    return torch.tensor(ids + [pad_id] * (length - len(ids))), torch.tensor([1] * len(ids) + [0] * (length - len(ids)))


if __name__ == '__main__':
    torch.manual_seed(0)
    chunk_size, num_neighbours = 8, 2
    embedder = ChunkEmbedder(num_tokens=64)
    index = ChunkIndex(embedder, torch.randint(1, 64, (400,)), chunk_size=chunk_size)

    model = RETRO(num_tokens=64, chunk_size=chunk_size)
    seqs = torch.randint(1, 64, (2, 33))
    neighbours = index.retrieve_for_sequences(seqs[:, :32], num_neighbours)
    loss = model(seqs, neighbours, return_loss=True)
    loss.backward()

    query_ids, query_mask = encode_text('walk', chunk_size)
    found = index.search(embedder(query_ids[None], attention_mask=query_mask[None]), num_neighbours)
    print('loss', round(loss.item(), 4), 'neighbours', tuple(neighbours.shape), 'query hits', tuple(found.shape))
