"""A dense-retrieval bi-encoder (sentence-transformers / DPR style) with four pooling modes.

A shared BERT-like encoder (nn.TransformerEncoder, post-norm, batch-first) embeds queries and
passages; the sentence embedding is the [CLS] state, the masked mean, the masked max or an
attention pooling with a learned scorer; training uses InfoNCE over in-batch and hard
negatives with duplicate passages masked out; a ColBERT-style late-interaction scorer is kept
for re-ranking. Tokenizer output is a Hugging Face style dict whose `attention_mask` is int64
(1 = real token). Multiplying by the mask is right for sums over states (mean pooling,
late-interaction sums); anything that goes through softmax or max must be filled instead.

Source: seed self_attention_mask_guide.txt §3 (common mistakes: a PyTorch mask is added, not
multiplied) and §7 Q3 (additive vs multiplicative masks); conventions.md §1 cheat-sheet.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP = 0, 1, 2


def tokenize(texts, max_length=16, vocab_size=200):
    rows = [[CLS] + [3 + (sum(map(ord, w)) * 31 % (vocab_size - 3)) for w in t.lower().split()][: max_length - 2] + [SEP] for t in texts]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r)] = torch.tensor(r)
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=200, dim=64, heads=4, layers=2, max_len=32):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, dim)
        self.norm = nn.LayerNorm(dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.norm(self.tok(input_ids) + self.pos(positions)[None])
        return self.encoder(h, src_key_padding_mask=attention_mask == 0)


class BiEncoder(nn.Module):
    def __init__(self, dim=64, pooling="attention", temperature=0.05):
        super().__init__()
        self.encoder = TextEncoder(dim=dim)
        self.pooling = pooling
        self.temperature = temperature
        self.pool_scorer = nn.Linear(dim, 1)
        self.colbert_proj = nn.Linear(dim, 32, bias=False)

    # -- pooling -------------------------------------------------------------------------------

    @staticmethod
    def cls_pool(hidden, attention_mask):
        return hidden[:, 0]

    @staticmethod
    def mean_pool(hidden, attention_mask):
        mask = attention_mask[..., None].to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    @staticmethod
    def max_pool(hidden, attention_mask):
        keep = attention_mask.bool()[..., None]
        return hidden.masked_fill(~keep, torch.finfo(hidden.dtype).min).max(dim=1).values

    def attention_pool(self, hidden, attention_mask):
        keep = attention_mask.bool()
        logits = self.pool_scorer(hidden).squeeze(-1)
        weights = torch.softmax(logits.masked_fill(~keep, torch.finfo(logits.dtype).min), dim=-1)
        return (weights[..., None] * hidden).sum(1)

    def embed(self, batch):
        hidden = self.encoder(batch["input_ids"], batch["attention_mask"])
        pool = {"cls": self.cls_pool, "mean": self.mean_pool, "max": self.max_pool, "attention": self.attention_pool}[self.pooling]
        return F.normalize(pool(hidden, batch["attention_mask"]), dim=-1)

    # -- late interaction ----------------------------------------------------------------------

    def token_embeddings(self, batch):
        hidden = self.encoder(batch["input_ids"], batch["attention_mask"])
        return F.normalize(self.colbert_proj(hidden), dim=-1)

    def late_interaction(self, queries, passages):
        """MaxSim: for each query token the best real passage token, summed over real query tokens."""
        q, d = self.token_embeddings(queries), self.token_embeddings(passages)
        q_keep, d_keep = queries["attention_mask"].bool(), passages["attention_mask"].bool()
        sim = torch.einsum("aqh,bdh->abqd", q, d)
        sim = sim.masked_fill(~d_keep[None, :, None, :], torch.finfo(sim.dtype).min)
        best = sim.max(dim=-1).values
        q_weight = q_keep[:, None, :].to(best.dtype)
        return (best * q_weight).sum(-1) / q_weight.sum(-1)

    # -- training ------------------------------------------------------------------------------

    def contrastive_loss(self, queries, positives, hard_negatives=None, passage_ids=None):
        """InfoNCE; passage_ids marks duplicates, which must not count as negatives."""
        q = self.embed(queries)
        p = self.embed(positives)
        candidates = p if hard_negatives is None else torch.cat([p, self.embed(hard_negatives)])
        scores = q @ candidates.T / self.temperature
        target = torch.arange(q.shape[0], device=q.device)
        if passage_ids is not None:
            same = passage_ids[:, None] == passage_ids[None, :]
            same = F.pad(same, (0, candidates.shape[0] - same.shape[1]), value=False)
            positive = torch.eye(q.shape[0], candidates.shape[0], dtype=torch.bool, device=q.device)
            scores = scores.masked_fill(same & ~positive, torch.finfo(scores.dtype).min)
        return F.cross_entropy(scores, target)


@torch.no_grad()
def search(model, query, corpus_embeddings, allowed=None, k=2):
    """Top-k passages; `allowed` (num_passages,) bool, False = filtered out (e.g. other tenant)."""
    scores = model.embed(query) @ corpus_embeddings.T
    if allowed is not None:
        scores = scores.masked_fill(~allowed[None, :], float("-inf"))
    return scores.topk(k, dim=-1)


def build_corpus_ids(passages):
    """Equal passages get the same id, for the duplicate masking in the loss."""
    seen = {}
    return torch.tensor([seen.setdefault(p, len(seen)) for p in passages])



@torch.no_grad()
def mine_hard_negatives(model, queries, corpus_embeddings, positive_ids, k=1):
    """Highest-scoring passages that are not a query's positive (positive_ids: (Q, P), -1 = none)."""
    scores = model.embed(queries) @ corpus_embeddings.T
    positive_keep = positive_ids >= 0
    is_positive = torch.zeros_like(scores, dtype=torch.bool)
    rows = torch.arange(scores.shape[0])[:, None].expand_as(positive_ids)
    is_positive[rows[positive_keep], positive_ids[positive_keep]] = True
    return scores.masked_fill(is_positive, float("-inf")).topk(k, dim=-1).indices


def recall_at_k(retrieved, relevant):
    """retrieved (Q, k) passage ids; relevant (Q, R) ids padded with -1."""
    relevant_keep = relevant >= 0
    hits = (retrieved[:, :, None] == relevant[:, None, :]) & relevant_keep[:, None, :]
    found = hits.any(dim=1).sum(-1).float()
    return (found / relevant_keep.sum(-1).clamp(min=1)).mean()


def matryoshka_loss(model, queries, positives, dims=(16, 32, 64)):
    """InfoNCE on truncated embeddings, averaged over the truncation sizes."""
    q_full = model.embed(queries)
    p_full = model.embed(positives)
    target = torch.arange(q_full.shape[0])
    losses = []
    for d in dims:
        q = F.normalize(q_full[:, :d], dim=-1)
        p = F.normalize(p_full[:, :d], dim=-1)
        losses.append(F.cross_entropy(q @ p.T / model.temperature, target))
    return torch.stack(losses).mean()


class CrossEncoderReranker(nn.Module):
    """Scores (query, passage) pairs jointly; the pair is one sequence [CLS] q [SEP] p [SEP]."""

    def __init__(self, dim=64):
        super().__init__()
        self.encoder = TextEncoder(dim=dim)
        self.segment = nn.Embedding(2, dim)
        self.head = nn.Linear(dim, 1)

    @staticmethod
    def tokenize_pairs(queries, passages):
        q, p = tokenize(queries), tokenize(passages)
        rows, segments = [], []
        for qi, qm, pi, pm in zip(q["input_ids"], q["attention_mask"], p["input_ids"], p["attention_mask"]):
            q_tok, p_tok = qi[qm.bool()], pi[pm.bool()][1:]
            rows.append(torch.cat([q_tok, p_tok]))
            segments.append(torch.cat([torch.zeros_like(q_tok), torch.ones_like(p_tok)]))
        input_ids = nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)
        token_type_ids = nn.utils.rnn.pad_sequence(segments, batch_first=True, padding_value=0)
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": (input_ids != PAD).long()}

    def forward(self, batch):
        enc = self.encoder
        positions = torch.arange(batch["input_ids"].shape[1])
        h = enc.norm(enc.tok(batch["input_ids"]) + enc.pos(positions)[None] + self.segment(batch["token_type_ids"]))
        h = enc.encoder(h, src_key_padding_mask=batch["attention_mask"] == 0)
        return self.head(h[:, 0]).squeeze(-1)

if __name__ == "__main__":
    torch.manual_seed(0)
    model = BiEncoder().eval()
    passages = [
        "the eiffel tower is in paris",
        "mount everest is the highest mountain on earth and lies in the himalaya",
        "the eiffel tower is in paris",
        "python is a programming language",
    ]
    batch = tokenize(passages)
    with torch.no_grad():
        corpus = model.embed(batch)
        alone = model.embed(tokenize(passages[:1]))
        print("passage 0: batched vs alone max |diff| =", (corpus[0] - alone[0]).abs().max().item())
        for pooling in ("cls", "mean", "max"):
            model.pooling = pooling
            diff = (model.embed(batch)[0] - model.embed(tokenize(passages[:1]))[0]).abs().max().item()
            print(f"{pooling:>4} pooling: batched vs alone max |diff| = {diff:.2e}")
        model.pooling = "attention"
        queries = tokenize(["where is the eiffel tower", "highest mountain"])
        li = model.late_interaction(queries, batch)
        li_alone = model.late_interaction(queries, tokenize(passages[:1]))
        print("late interaction: batched vs alone max |diff| =", (li[:, 0] - li_alone[:, 0]).abs().max().item())
        allowed = torch.tensor([True, True, False, True])
        print("search", search(model, tokenize(["eiffel tower paris"]), corpus, allowed).indices.tolist())
    model.train()
    queries = tokenize(["where is the eiffel tower", "highest mountain", "eiffel tower city", "a language"])
    loss = model.contrastive_loss(queries, batch, tokenize(["a river in france", "a tall building"]), build_corpus_ids(passages))
    loss = loss + matryoshka_loss(model, queries, batch)
    print("loss finite:", bool(torch.isfinite(loss)))
    model.eval()
    with torch.no_grad():
        queries = tokenize(["eiffel tower paris", "programming language"])
        negatives = mine_hard_negatives(model, queries, corpus, torch.tensor([[0, 2], [3, -1]]))
        print("hard negatives", negatives.tolist())
        retrieved = search(model, queries, corpus).indices
        print("recall@2", recall_at_k(retrieved, torch.tensor([[0, 2], [3, -1]])).item())
        reranker = CrossEncoderReranker().eval()
        pairs = CrossEncoderReranker.tokenize_pairs(["eiffel tower", "eiffel tower"], [passages[0], passages[1]])
        single = CrossEncoderReranker.tokenize_pairs(["eiffel tower"], [passages[0]])
        print("reranker: batched vs alone |diff| =", (reranker(pairs)[0] - reranker(single)[0]).abs().item())
