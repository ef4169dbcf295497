"""SPLADE-max sparse lexical expansion for first-stage retrieval.

A small BERT-like masked-language model gives vocabulary logits per token; the document
(or query) representation is the max over tokens of log(1 + relu(logits)), i.e. a sparse
vector over the vocabulary. Training uses in-batch negatives with a hard negative and the
FLOPS regulariser on both sides (lambda_q, lambda_d); indexing prunes each document to its
top terms and builds an inverted index that is scored by sparse dot products.

Source: seed masked_fill_inplace.txt (注意 / 梯度计算风险; 总结 2 and 3).
"""
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "vocab_size": 512,
    "hidden": 64,
    "heads": 4,
    "layers": 2,
    "max_len": 32,
    "lambda_q": 3e-4,
    "lambda_d": 1e-4,
    "top_terms": 24,
}


class SpladeTokenizer:
    pad_token_id, cls_token_id, sep_token_id = 0, 1, 2

    def __init__(self, vocab_size, max_len):
        self.vocab_size, self.max_len = vocab_size, max_len

    def convert_tokens_to_ids(self, word):
        return 3 + sum(ord(c) * 17 ** i for i, c in enumerate(word)) % (self.vocab_size - 3)

    def __call__(self, texts, padding=True, truncation=True, return_tensors="pt"):
        rows = [[self.cls_token_id] + [self.convert_tokens_to_ids(w) for w in t.lower().split()][: self.max_len - 2]
                + [self.sep_token_id] for t in texts]
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([r + [self.pad_token_id] * (width - len(r)) for r in rows])
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}


class TinyMLM(nn.Module):
    def __init__(self, vocab_size, hidden, heads, layers, max_len):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position = nn.Embedding(max_len, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1, batch_first=True,
                                           activation="gelu", norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.transform = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden))
        self.decoder = nn.Linear(hidden, vocab_size)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.embeddings(input_ids) + self.position(pos)
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        return {"logits": self.decoder(self.transform(h))}


class Splade(nn.Module):
    def __init__(self, agg="max"):
        super().__init__()
        self.transformer_rep = TinyMLM(CONFIG["vocab_size"], CONFIG["hidden"], CONFIG["heads"],
                                       CONFIG["layers"], CONFIG["max_len"])
        self.agg = agg

    def encode(self, tokens):
        out = self.transformer_rep(**tokens)["logits"]
        act = torch.relu(out)
        act.masked_fill_(tokens["attention_mask"].unsqueeze(-1) == 0, 0.0)  # expect: MC505 relu
        if self.agg == "max":
            return torch.log1p(act).amax(dim=1)
        return torch.log1p(act).sum(dim=1)

    def forward(self, q_kwargs=None, d_kwargs=None):
        out = {}
        if q_kwargs is not None:
            out["q_rep"] = self.encode(q_kwargs)
        if d_kwargs is not None:
            out["d_rep"] = self.encode(d_kwargs)
        return out


def flops(reps):
    return torch.sum(torch.mean(torch.abs(reps), dim=0) ** 2)


def train_step(model, tokenizer, optimizer, queries, positives, negatives):
    model.train()
    out = model(q_kwargs=tokenizer(queries), d_kwargs=tokenizer(positives + negatives))
    q_rep, d_rep = out["q_rep"], out["d_rep"]
    scores = q_rep @ d_rep.t()
    labels = torch.arange(len(queries))
    loss = F.cross_entropy(scores, labels)
    loss = loss + CONFIG["lambda_q"] * flops(q_rep) + CONFIG["lambda_d"] * flops(d_rep)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


class InvertedIndex:
    def __init__(self, top_terms):
        self.top_terms = top_terms
        self.postings = defaultdict(list)
        self.doc_ids = []

    def add(self, doc_ids, d_rep):
        for doc_id, rep in zip(doc_ids, d_rep):
            values, terms = rep.topk(self.top_terms)
            row = len(self.doc_ids)
            self.doc_ids.append(doc_id)
            for t, w in zip(terms.tolist(), values.tolist()):
                if w > 0:
                    self.postings[t].append((row, w))

    def search(self, q_rep, k=3):
        scores = torch.zeros(len(self.doc_ids))
        for t in q_rep.nonzero().flatten().tolist():
            for row, w in self.postings.get(t, []):
                scores[row] += q_rep[t].item() * w
        top = scores.topk(min(k, len(self.doc_ids)))
        return [(self.doc_ids[i], round(s, 4)) for s, i in zip(top.values.tolist(), top.indices.tolist())]


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = SpladeTokenizer(CONFIG["vocab_size"], CONFIG["max_len"])
    model = Splade(agg="max")
    docs = {
        "d1": "the eiffel tower is a wrought iron lattice tower in paris",
        "d2": "photosynthesis converts light energy into chemical energy in plants",
        "d3": "the great wall of china stretches thousands of kilometres",
        "d4": "iron is a chemical element with symbol fe",
    }
    index = InvertedIndex(CONFIG["top_terms"])
    model.eval()
    with torch.inference_mode():
        d_rep = model(d_kwargs=tokenizer(list(docs.values())))["d_rep"]
        index.add(list(docs), d_rep)
        print("avg nonzero terms per doc", (d_rep > 0).sum(-1).float().mean().item())
        for query in ["iron tower paris", "how do plants make energy"]:
            q_rep = model(q_kwargs=tokenizer([query]))["q_rep"][0]
            print(query, "->", index.search(q_rep, k=2))
