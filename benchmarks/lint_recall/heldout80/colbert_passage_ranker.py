"""ColBERTv2-style late-interaction passage ranking on an MS MARCO-like triples file.

QueryTokenizer / DocTokenizer with the [Q] and [D] marker tokens, queries padded to
query_maxlen and augmented with [MASK] tokens, a punctuation skiplist on the document side,
a small BERT-like encoder, a linear compression to `dim`, L2-normalised token embeddings and
MaxSim scoring (colbert_score) with in-batch negatives and one hard negative per query.

Source: conventions.md §1 (Hugging Face attention_mask row, direction cheat-sheet), §2.4, §5 item 7.
"""
import math
import string

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, CLS_ID, SEP_ID, MASK_ID, Q_MARKER_ID, D_MARKER_ID = 0, 1, 2, 3, 4, 5
VOCAB_SIZE = 4096


def word_id(word):
    h = 7
    for ch in word:
        h = (h * 131 + ord(ch)) % (VOCAB_SIZE - 16)
    return h + 16


SKIPLIST = {word_id(p) for p in string.punctuation}


def split_words(text):
    for p in ",.?!;:":
        text = text.replace(p, f" {p} ")
    return text.lower().split()


class DocTokenizer:
    marker_id = D_MARKER_ID

    def __init__(self, maxlen):
        self.maxlen = maxlen

    def __call__(self, batch_text, padding="longest"):
        rows = []
        for text in batch_text:
            ids = [word_id(w) for w in split_words(text)][: self.maxlen - 3]
            rows.append([CLS_ID, self.marker_id] + ids + [SEP_ID])
        width = self.maxlen if padding == "max_length" else max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention_mask[i, : len(r)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def tensorize(self, batch_text):
        enc = self(batch_text)
        return enc["input_ids"], enc["attention_mask"]


class QueryTokenizer(DocTokenizer):
    marker_id = Q_MARKER_ID

    def tensorize(self, batch_text):
        enc = self(batch_text, padding="max_length")
        ids, attention_mask = enc["input_ids"], enc["attention_mask"]
        augment = ~enc["attention_mask"]  # expect: MC518 augment
        ids = ids.masked_fill(augment.bool(), MASK_ID)
        return ids, attention_mask


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, attention_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        keep = attention_mask.bool()[:, None, None, :]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=self.drop.p if self.training else 0.0)
        x = self.ln1(x + self.drop(self.out(a.transpose(1, 2).reshape(b, n, d))))
        return self.ln2(x + self.drop(self.ff(x)))


class ColBERT(nn.Module):
    def __init__(self, hidden=64, heads=4, layers=2, dim=16, max_pos=128):
        super().__init__()
        self.tok = nn.Embedding(VOCAB_SIZE, hidden, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_pos, hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads) for _ in range(layers))
        self.linear = nn.Linear(hidden, dim, bias=False)

    def bert(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.tok(input_ids) + self.pos(positions)[None]
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x

    def query(self, input_ids, attention_mask):
        Q = self.linear(self.bert(input_ids, attention_mask))
        return F.normalize(Q, p=2, dim=2)

    def mask(self, input_ids, skiplist):
        return [[(x not in skiplist) and (x != PAD_ID) for x in d] for d in input_ids.tolist()]

    def doc(self, input_ids, attention_mask, keep_dims=True):
        D = self.linear(self.bert(input_ids, attention_mask))
        mask = torch.tensor(self.mask(input_ids, skiplist=SKIPLIST), device=D.device).unsqueeze(2).float()
        D = F.normalize(D * mask, p=2, dim=2)
        return (D, mask.squeeze(2).bool()) if keep_dims else [d[m.squeeze(-1).bool()] for d, m in zip(D, mask)]

    def forward(self, Q, D):
        Q = self.query(*Q)
        D, D_mask = self.doc(*D)
        nway = D.size(0) // Q.size(0)
        Q_dup = Q.repeat_interleave(nway, dim=0).contiguous()
        return colbert_score(Q_dup, D, D_mask)


def colbert_score(Q, D_padded, D_mask):
    scores = D_padded @ Q.transpose(1, 2)
    D_padding = ~D_mask.view(scores.size(0), scores.size(1)).bool()
    scores[D_padding] = -9999
    return scores.max(1).values.sum(-1)


def train_step(model, optimizer, q_tok, d_tok, triples):
    queries = [q for q, _, _ in triples]
    passages = [p for _, pos, neg in triples for p in (pos, neg)]
    Q = q_tok.tensorize(queries)
    D = d_tok.tensorize(passages)
    scores = model(Q, D).view(len(queries), -1)
    labels = torch.zeros(len(queries), dtype=torch.long)
    loss = F.cross_entropy(scores, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def rank(model, q_tok, d_tok, query, collection, k=3):
    model.eval()
    Q = model.query(*q_tok.tensorize([query]))
    D, D_mask = model.doc(*d_tok.tensorize(collection))
    scores = colbert_score(Q.expand(D.size(0), -1, -1), D, D_mask)
    top = scores.topk(min(k, len(collection)))
    return [(collection[i], round(s, 3)) for s, i in zip(top.values.tolist(), top.indices.tolist())]


if __name__ == "__main__":
    torch.manual_seed(0)
    q_tok, d_tok = QueryTokenizer(maxlen=12), DocTokenizer(maxlen=40)
    triples = [
        ("what is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level.",
         "The Nile is the longest river in Africa."),
        ("who wrote hamlet", "Hamlet is a tragedy written by William Shakespeare.",
         "Boiling water is used to cook pasta, rice and eggs."),
        ("capital of france", "Paris is the capital and largest city of France.",
         "France borders Spain, Belgium, Germany and Italy."),
    ]
    model = ColBERT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(3):
        model.train()
        loss = train_step(model, optimizer, q_tok, d_tok, triples)
    print("loss", round(loss, 4))
    collection = [p for _, pos, neg in triples for p in (pos, neg)]
    for hit in rank(model, q_tok, d_tok, "who wrote hamlet?", collection):
        print(hit)
