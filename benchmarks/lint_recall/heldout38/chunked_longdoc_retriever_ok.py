"""Long-document dense retrieval with chunk-local attention and MaxP scoring.

Documents of up to 192 tokens are encoded in one pass by a BERT-style encoder whose
self-attention stays inside fixed-size chunks; each chunk is mean-pooled into a vector and
a query scores a document by its best chunk (MaxP, as in BERT-MaxP and PARADE's first
stage). Training uses in-batch negatives; the demo reports MRR@10 on synthetic documents
whose relevant passage sits in one chunk.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask); conventions.md §2.3 and
§1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RetrieverConfig:
    vocab_size: int = 200
    pad_token_id: int = 0
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    intermediate_size: int = 128
    max_position: int = 192
    chunk_size: int = 32
    temperature: float = 0.05


def chunk_layout(seq_len: int, chunk_size: int, device=None):
    chunk_ids = torch.arange(seq_len, device=device) // chunk_size
    bias = torch.zeros(seq_len, seq_len, device=device)
    for start in range(0, seq_len, chunk_size):
        bias[start : start + chunk_size, start : start + chunk_size] = 0.0
    bias[chunk_ids[:, None] != chunk_ids[None, :]] = float("-inf")
    return chunk_ids, bias


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: RetrieverConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: RetrieverConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def transpose_for_scores(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, attn_bias, key_keep):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores + attn_bias
        scores = scores.masked_fill(~key_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        context = (probs @ v).transpose(1, 2).reshape(hidden_states.shape)
        return self.dense(context)


class BertLayer(nn.Module):
    def __init__(self, cfg: RetrieverConfig):
        super().__init__()
        self.attention = BertSelfAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size)
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.out_norm = nn.LayerNorm(cfg.hidden_size)

    def forward(self, hidden_states, attn_bias, key_keep):
        h = self.attn_norm(hidden_states + self.attention(hidden_states, attn_bias, key_keep))
        return self.out_norm(h + self.output(F.gelu(self.intermediate(h))))


class ChunkedBertModel(nn.Module):
    def __init__(self, cfg: RetrieverConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_layers))
        self._layouts: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def get_layout(self, seq_len: int, device: torch.device):
        key = (seq_len, str(device))
        if key not in self._layouts:
            self._layouts[key] = chunk_layout(seq_len, self.cfg.chunk_size, device)
        return self._layouts[key]

    def forward(self, input_ids, attention_mask):
        key_keep = attention_mask.bool()
        chunk_ids, attn_bias = self.get_layout(input_ids.shape[1], input_ids.device)
        hidden = self.embeddings(input_ids)
        for layer_module in self.layer:
            hidden = layer_module(hidden, attn_bias, key_keep)
        return hidden, chunk_ids


class MaxPRetriever(nn.Module):
    def __init__(self, cfg: RetrieverConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = ChunkedBertModel(cfg)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def encode_chunks(self, input_ids, attention_mask):
        hidden, chunk_ids = self.encoder(input_ids, attention_mask)
        onehot = F.one_hot(chunk_ids).to(hidden.dtype)
        keep = attention_mask.to(hidden.dtype)
        summed = torch.einsum("bth,tc->bch", hidden * keep[..., None], onehot)
        counts = torch.einsum("bt,tc->bc", keep, onehot)
        chunk_vecs = F.normalize(self.proj(summed / counts.clamp(min=1.0)[..., None]), dim=-1)
        return chunk_vecs, counts > 0

    def encode_queries(self, input_ids, attention_mask):
        vecs, _ = self.encode_chunks(input_ids, attention_mask)
        return vecs[:, 0]

    def score(self, q_vecs, d_chunks, d_chunk_keep):
        sims = torch.einsum("qh,dch->qdc", q_vecs, d_chunks)
        sims = sims.masked_fill(~d_chunk_keep[None], torch.finfo(sims.dtype).min)
        return sims.max(dim=-1).values

    def forward(self, q_ids, q_mask, d_ids, d_mask):
        q_vecs = self.encode_queries(q_ids, q_mask)
        d_chunks, d_chunk_keep = self.encode_chunks(d_ids, d_mask)
        return self.score(q_vecs, d_chunks, d_chunk_keep) / self.cfg.temperature


def make_corpus(num_docs: int, rng: random.Random, cfg: RetrieverConfig):
    docs, queries = [], []
    for _ in range(num_docs):
        length = rng.randrange(40, cfg.max_position + 1)
        doc = [rng.randrange(110, cfg.vocab_size) for _ in range(length)]
        keys = rng.sample(range(10, 110), 8)
        start = rng.randrange(0, length - 8)
        doc[start : start + 8] = keys
        docs.append(doc)
        queries.append(rng.sample(keys, 4))
    return docs, queries


def collate(seqs: list[list[int]], multiple: int, pad_id: int = 0):
    longest = max(len(s) for s in seqs)
    width = -(-longest // multiple) * multiple
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def mrr_at_10(model: MaxPRetriever, docs, queries) -> float:
    model.eval()
    with torch.no_grad():
        d_ids, d_mask = collate(docs, model.cfg.chunk_size)
        q_ids, q_mask = collate(queries, 1)
        scores = model(q_ids, q_mask, d_ids, d_mask)
    ranks = (~(scores < scores.diagonal()[:, None])).sum(dim=1)
    rr = torch.where(ranks <= 10, 1.0 / ranks.float(), torch.zeros_like(ranks, dtype=torch.float))
    model.train()
    return rr.mean().item()


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = RetrieverConfig()
    model = MaxPRetriever(cfg)
    train_docs, train_queries = make_corpus(320, rng, cfg)
    test_docs, test_queries = make_corpus(48, rng, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    batch_size = 16
    for epoch in range(4):
        order = list(range(len(train_docs)))
        rng.shuffle(order)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            d_ids, d_mask = collate([train_docs[j] for j in idx], cfg.chunk_size)
            q_ids, q_mask = collate([train_queries[j] for j in idx], 1)
            logits = model(q_ids, q_mask, d_ids, d_mask)
            loss = F.cross_entropy(logits, torch.arange(len(idx)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: last batch loss {loss.item():.3f}")
    mrr = mrr_at_10(model, test_docs, test_queries)
    print(f"test MRR@10 over {len(test_docs)} documents: {mrr:.3f}")


if __name__ == "__main__":
    main()
