"""REALM pre-training step: retrieve documents for a salient-span masked sentence and predict
the masked tokens with a knowledge-augmented encoder, marginalising over the retrieved set.

The neural knowledge retriever embeds the masked query and every document ([CLS] vectors
projected to 128, here 32, dimensions), scores them by inner product against a refreshed
document index and keeps the top-k plus the null document. The knowledge-augmented
encoder reads `[CLS] x [SEP] z [SEP]` for every retrieved z; log p(y | x) is the logsumexp
over z of log p(z | x) plus the masked-token log-likelihoods.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask) and §7 Q3; conventions.md §1 (additive masks), §2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB, EMBED_DIM, TOP_K = 700, 32, 2


def ids_of(words):
    return [4 + (sum(ord(c) * (7 + i) for i, c in enumerate(w)) % (VOCAB - 4)) for w in words]


def salient_span_mask(sentence, spans):
    words = sentence.lower().split()
    ids, labels = ids_of(words), []
    for span in spans:
        s = span.lower().split()
        start = next(i for i in range(len(words)) if words[i:i + len(s)] == s)
        for j in range(start, start + len(s)):
            labels.append((j + 1, ids[j]))
            ids[j] = MASK
    return [CLS] + ids + [SEP], labels


def pad_batch(rows):
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return input_ids, (input_ids != PAD).long()


class Bert(nn.Module):
    def __init__(self, hidden=64, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.word = nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.position = nn.Embedding(64, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.attn = nn.ModuleList(nn.Linear(hidden, 3 * hidden) for _ in range(layers))
        self.attn_out = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
                                 for _ in range(layers))
        self.ln = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(2 * layers))

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        b, n = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        h = self.word(input_ids) + self.position.weight[:n] + self.token_type(token_type_ids)
        ext = torch.where(attention_mask[:, None, None, :].bool(), 0.0, float("-inf"))
        for i, (qkv, out, ffn) in enumerate(zip(self.attn, self.attn_out, self.ffn)):
            q, k, v = qkv(h).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + ext, dim=-1)
            h = self.ln[2 * i](h + out((probs @ v).transpose(1, 2).reshape(b, n, -1)))
            h = self.ln[2 * i + 1](h + ffn(h))
        return h


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = Bert()
        self.projection = nn.Linear(64, EMBED_DIM)

    def forward(self, input_ids, attention_mask):
        return self.projection(self.bert(input_ids, attention_mask)[:, 0])


class Realm(nn.Module):
    def __init__(self):
        super().__init__()
        self.query_embedder = Embedder()
        self.doc_embedder = Embedder()
        self.encoder = Bert()
        self.mlm_head = nn.Linear(64, VOCAB)

    @torch.no_grad()
    def refresh_index(self, docs):
        self.docs = [[]] + [ids_of(d.lower().split()) for d in docs]
        rows = [[CLS] + d[:20] + [SEP] for d in self.docs]
        self.doc_index = self.doc_embedder(*pad_batch(rows))

    def forward(self, query_rows, labels):
        q_ids, q_mask = pad_batch(query_rows)
        q_emb = self.query_embedder(q_ids, q_mask)
        with torch.no_grad():
            top = (q_emb @ self.doc_index[1:].t()).topk(TOP_K, dim=-1).indices + 1
        retrieved = torch.cat([torch.zeros(len(query_rows), 1, dtype=torch.long), top], dim=1)
        doc_emb = self.doc_embedder(*pad_batch([[CLS] + self.docs[z][:20] + [SEP] for z in retrieved.flatten().tolist()]))
        log_pz = torch.log_softmax(torch.einsum("bd,bkd->bk", q_emb, doc_emb.view(*retrieved.shape, -1)), dim=-1)
        joined, types = [], []
        for b, row in enumerate(query_rows):
            for z in retrieved[b].tolist():
                doc = self.docs[z][:20] + [SEP]
                joined.append(row + doc)
                types.append([0] * len(row) + [1] * len(doc))
        ids, mask = pad_batch(joined)
        token_types = pad_batch(types)[0]
        log_probs = torch.log_softmax(self.mlm_head(self.encoder(ids, mask, token_types)), dim=-1)
        log_probs = log_probs.view(len(query_rows), retrieved.size(1), ids.size(1), VOCAB)
        marginal = []
        for b, spans in enumerate(labels):
            pos = torch.tensor([p for p, _ in spans])
            tgt = torch.tensor([t for _, t in spans])
            log_py = log_probs[b][:, pos, tgt].sum(-1)
            marginal.append(torch.logsumexp(log_pz[b] + log_py, dim=0))
        return -torch.stack(marginal).mean(), retrieved


if __name__ == "__main__":
    torch.manual_seed(0)
    docs = ["the eiffel tower was completed in 1889 for the world fair in paris",
            "marie curie won the nobel prize in physics in 1903",
            "the pacific ocean is the largest ocean on earth",
            "the first moon landing was in 1969 with apollo 11"]
    corpus = [("the apollo 11 mission landed on the moon in 1969", ["apollo 11", "1969"]),
              ("marie curie received the nobel prize in 1903", ["marie curie"])]
    batch = [salient_span_mask(s, spans) for s, spans in corpus]
    model = Realm()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for step in range(3):
        if step % 2 == 0:
            model.refresh_index(docs)
        loss, retrieved = model([r for r, _ in batch], [l for _, l in batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} retrieved {retrieved.tolist()}")
