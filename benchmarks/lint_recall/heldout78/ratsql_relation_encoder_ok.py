"""RAT-SQL relation-aware encoder for Spider, batched over questions and their schemas.

Question words, columns and tables form one sequence per example; every ordered pair of
items gets a relation (question distance, column-table membership, primary and foreign
keys, exact / partial schema-linking matches) whose key and value embeddings enter the
attention as in Shaw et al. The encoder feeds a schema-item selection head that
predicts which columns and tables the gold SQL mentions.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md §3 items 5 and 22), §2.3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

RELATIONS = ["pad"] + [f"qq_dist{d}" for d in range(-2, 3)] + [
    "qc_default", "qcCEM", "qcCPM", "qt_default", "qtTEM", "qtTPM",
    "cq_default", "cqCEM", "cqCPM", "tq_default", "tqTEM", "tqTPM",
    "cc_default", "cc_table_match", "cc_foreign_key_forward", "cc_foreign_key_backward",
    "ct_default", "ct_table_match", "ct_primary_key", "tc_default", "tc_table_match", "tc_primary_key",
    "tt_default", "tt_foreign_key",
]
REL = {name: i for i, name in enumerate(RELATIONS)}


def match(words, name):
    name_words = name.split()
    if " ".join(name_words) in " ".join(words):
        return "EM"
    return "PM" if any(w in words for w in name_words) else None


def compute_relations(ex):
    q, cols, tabs = ex["question"].split(), ex["columns"], ex["tables"]
    kinds = [("q", i) for i in range(len(q))] + [("c", i) for i in range(len(cols))] + [("t", i) for i in range(len(tabs))]
    rel = torch.zeros(len(kinds), len(kinds), dtype=torch.long)
    for a, (ka, ia) in enumerate(kinds):
        for b, (kb, ib) in enumerate(kinds):
            if ka == kb == "q":
                name = f"qq_dist{max(-2, min(2, ib - ia))}"
            elif "q" in (ka, kb):
                word, item, j = (q[ia], kb, ib) if ka == "q" else (q[ib], ka, ia)
                m = match([word], cols[j][0] if item == "c" else tabs[j])
                name = f"{ka}{kb}{item.upper()}{m}" if m else f"{ka}{kb}_default"
            elif ka == kb == "c":
                fk = ex["foreign_keys"]
                name = ("cc_foreign_key_forward" if (ia, ib) in fk else "cc_foreign_key_backward" if (ib, ia) in fk
                        else "cc_table_match" if cols[ia][1] == cols[ib][1] else "cc_default")
            elif ka == "c":
                name = ("ct_primary_key" if ia in ex["primary_keys"] and cols[ia][1] == ib
                        else "ct_table_match" if cols[ia][1] == ib else "ct_default")
            elif kb == "c":
                name = ("tc_primary_key" if ib in ex["primary_keys"] and cols[ib][1] == ia
                        else "tc_table_match" if cols[ib][1] == ia else "tc_default")
            else:
                linked = any({cols[x][1], cols[y][1]} == {ia, ib} for x, y in ex["foreign_keys"])
                name = "tt_foreign_key" if linked and ia != ib else "tt_default"
            rel[a, b] = REL[name]
    return rel


def get_attn_mask(seq_lengths):
    max_length = int(max(seq_lengths))
    keep = torch.arange(max_length)[None, :] < torch.tensor(seq_lengths)[:, None]
    return keep[:, :, None] & keep[:, None, :]


def relative_attention_logits(query, key, relation):
    qk_matmul = torch.matmul(query, key.transpose(-2, -1))
    q_tr = torch.matmul(query.permute(0, 2, 1, 3), relation.transpose(-2, -1)).permute(0, 2, 1, 3)
    return (qk_matmul + q_tr) / math.sqrt(query.shape[-1])


def attention_with_relations(query, key, value, relation_k, relation_v, mask=None, dropout=None):
    scores = relative_attention_logits(query, key, relation_k)
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), torch.finfo(scores.dtype).min)
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    out = torch.matmul(p_attn, value) + torch.matmul(p_attn.permute(0, 2, 1, 3), relation_v).permute(0, 2, 1, 3)
    return out, p_attn


class EncoderLayerWithRelations(nn.Module):
    def __init__(self, d_model, h, dropout=0.1):
        super().__init__()
        self.h, self.d_k = h, d_model // h
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        self.relation_k_emb = nn.Embedding(len(RELATIONS), self.d_k)
        self.relation_v_emb = nn.Embedding(len(RELATIONS), self.d_k)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, relation, mask):
        b, n, _ = x.shape
        y = self.norms[0](x)
        q, k, v = [lin(y).view(b, n, self.h, self.d_k).transpose(1, 2) for lin in self.linears[:3]]
        out, _ = attention_with_relations(q, k, v, self.relation_k_emb(relation), self.relation_v_emb(relation),
                                          mask=mask, dropout=self.dropout)
        x = x + self.dropout(self.linears[3](out.transpose(1, 2).reshape(b, n, -1)))
        return x + self.dropout(self.feed_forward(self.norms[1](x)))


class RatSqlSchemaEncoder(nn.Module):
    def __init__(self, vocab, d_model=64, heads=4, layers=2):
        super().__init__()
        self.vocab = vocab
        self.word_emb = nn.Embedding(len(vocab) + 1, d_model, padding_idx=0)
        self.kind_emb = nn.Embedding(3, d_model)
        self.layers = nn.ModuleList(EncoderLayerWithRelations(d_model, heads) for _ in range(layers))
        self.select = nn.Linear(d_model, 1)

    def embed_example(self, ex):
        words = [[w] for w in ex["question"].split()] + [c.split() for c, _ in ex["columns"]] + [t.split() for t in ex["tables"]]
        kinds = [0] * len(ex["question"].split()) + [1] * len(ex["columns"]) + [2] * len(ex["tables"])
        vecs = [self.word_emb(torch.tensor([self.vocab[w] for w in ws])).mean(0) for ws in words]
        return torch.stack(vecs) + self.kind_emb(torch.tensor(kinds))

    def forward(self, examples):
        items = [self.embed_example(ex) for ex in examples]
        lengths = [len(t) for t in items]
        x = nn.utils.rnn.pad_sequence(items, batch_first=True)
        relation = torch.zeros(len(examples), max(lengths), max(lengths), dtype=torch.long)
        for i, ex in enumerate(examples):
            relation[i, :lengths[i], :lengths[i]] = compute_relations(ex)
        mask = get_attn_mask(lengths)
        for layer in self.layers:
            x = layer(x, relation, mask)
        return self.select(x).squeeze(-1), lengths


SPIDER = [
    dict(question="how many singers are older than 30", columns=[("singer id", 0), ("name", 0), ("age", 0)],
         tables=["singer"], primary_keys=[0], foreign_keys=[], gold=[0, 0, 1, 1]),
    dict(question="list the names of concerts held in stadiums with capacity above 5000",
         columns=[("concert id", 0), ("concert name", 0), ("stadium id", 0), ("stadium id", 1), ("capacity", 1)],
         tables=["concert", "stadium"], primary_keys=[0, 3], foreign_keys=[(2, 3)], gold=[0, 1, 1, 1, 1, 1, 1]),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    words = {w for ex in SPIDER for w in ex["question"].split() + " ".join(c for c, _ in ex["columns"]).split() + " ".join(ex["tables"]).split()}
    model = RatSqlSchemaEncoder({w: i + 1 for i, w in enumerate(sorted(words))})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        logits, lengths = model(SPIDER)
        loss = 0.0
        for i, ex in enumerate(SPIDER):
            n_q = len(ex["question"].split())
            loss = loss + F.binary_cross_entropy_with_logits(logits[i, n_q:lengths[i]], torch.tensor(ex["gold"], dtype=torch.float))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
