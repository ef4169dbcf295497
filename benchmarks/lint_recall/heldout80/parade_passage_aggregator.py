"""PARADE-Transformer document re-ranking (passage representation aggregation).

Each document is cut into overlapping passages (passage length and stride in words, at most
`max_passages`). Every (query, passage) pair goes through a small BERT-like cross-encoder and
its [CLS] vector is kept; documents with fewer passages are padded with empty slots. A
two-layer transformer with a learned [CLS] token aggregates the passage vectors and a linear
layer gives the relevance score. Trained with a softmax cross-entropy over one relevant and
several non-relevant documents per query (capreolus-style pairwise sampling).

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md §3 items 5 and 22); conventions.md §2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PASSAGE_LEN, STRIDE, MAX_PASSAGES, MAXQLEN = 8, 4, 4, 6
VOCAB, PAD, CLS, SEP = 800, 0, 1, 2


def tokenize(text):
    return [3 + (sum(map(ord, w)) * 7 + len(w)) % (VOCAB - 3) for w in text.lower().split()]


def split_passages(doc_words):
    passages = []
    for start in range(0, max(len(doc_words) - PASSAGE_LEN, 0) + 1, STRIDE):
        passages.append(doc_words[start:start + PASSAGE_LEN])
        if len(passages) == MAX_PASSAGES:
            break
    return passages


def build_batch(query, docs):
    q = tokenize(query)[:MAXQLEN]
    rows, owner = [], []
    for d, doc in enumerate(docs):
        for passage in split_passages(tokenize(doc)):
            rows.append([CLS] + q + [SEP] + passage + [SEP])
            owner.append(d)
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    owner = torch.tensor(owner)
    slot = torch.cat([torch.arange((owner == d).sum().item()) for d in range(len(docs))])
    return {"input_ids": input_ids, "attention_mask": input_ids != PAD, "owner": owner, "slot": slot,
            "num_docs": len(docs)}


class CrossEncoder(nn.Module):
    def __init__(self, hidden=64, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.pos = nn.Embedding(64, hidden)
        self.qkv = nn.ModuleList(nn.Linear(hidden, 3 * hidden) for _ in range(layers))
        self.proj = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        b, n = input_ids.shape
        x = self.emb(input_ids) + self.pos.weight[:n]
        for qkv, proj, norm in zip(self.qkv, self.proj, self.norms):
            q, k, v = qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask[:, None, None, :])
            x = norm(x + proj(a.transpose(1, 2).reshape(b, n, -1)))
        return x[:, 0]


class AggregationLayer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
        self.last_attn = None

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, keep):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        pair = keep.unsqueeze(2) & keep.unsqueeze(1)
        scores = scores.masked_fill(~pair.unsqueeze(1), float("-inf"))  # expect: MC507 pair
        attn = F.softmax(scores, dim=-1)
        self.last_attn = (attn * pair.unsqueeze(1)).detach()
        ctx = (attn @ v).transpose(1, 2).reshape(x.shape)
        x = self.ln1(x + self.dense(ctx))
        return self.ln2(x + self.ffn(x))


class Parade(nn.Module):
    def __init__(self, hidden=64, heads=4, agg_layers=2):
        super().__init__()
        self.bert = CrossEncoder(hidden, heads)
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.agg = nn.ModuleList(AggregationLayer(hidden, heads) for _ in range(agg_layers))
        self.score = nn.Linear(hidden, 1)

    def forward(self, batch):
        cls_reps = self.bert(batch["input_ids"], batch["attention_mask"])
        n = batch["num_docs"]
        reps = cls_reps.new_zeros(n, MAX_PASSAGES, cls_reps.size(-1))
        reps[batch["owner"], batch["slot"]] = cls_reps
        passage_keep = torch.zeros(n, MAX_PASSAGES, dtype=torch.bool)
        passage_keep[batch["owner"], batch["slot"]] = True
        x = torch.cat([self.cls.expand(n, -1, -1), reps], dim=1)
        keep = torch.cat([passage_keep.new_ones(n, 1), passage_keep], dim=1)
        for layer in self.agg:
            x = layer(x, keep)
        return self.score(x[:, 0]).squeeze(-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Parade()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = [
        ("symptoms of vitamin d deficiency",
         ["vitamin d deficiency can cause bone pain muscle weakness fatigue and in children rickets "
          "which softens the bones and leads to skeletal deformities",
          "the stock market closed higher on friday",
          "sunlight exposure helps the skin produce vitamin d"]),
        ("how long to boil an egg",
         ["a soft boiled egg takes about six minutes in boiling water",
          "eggs are a good source of protein and contain all nine essential amino acids the body "
          "needs to build and repair muscle tissue after exercise",
          "the tour de france is a cycling race"]),
    ]
    for epoch in range(2):
        for query, docs in data:
            model.train()
            scores = model(build_batch(query, docs))
            loss = F.cross_entropy(scores[None], torch.zeros(1, dtype=torch.long))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        print("scores", model(build_batch(data[0][0], data[0][1])).tolist())
