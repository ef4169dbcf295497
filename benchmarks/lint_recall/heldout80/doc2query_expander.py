"""doc2query / docTTTTTquery document expansion for a BM25 index.

A small encoder-decoder is trained on (passage, query) pairs to generate the questions a
passage answers. At indexing time it samples several queries per passage with top-k
sampling and appends them to the passage text, so that BM25 can match vocabulary the
passage itself does not contain. The decoder layers are written with
nn.MultiheadAttention.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9), rasbt/LLMs-from-scratch#1061 (item 14); §1 direction cheat-sheet.
"""
import math
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F


class Doc2QueryTokenizer:
    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __init__(self, words):
        self.itos = ["<pad>", "<s>", "</s>", "<unk>"] + sorted(set(words))
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __call__(self, texts, max_length=24, add_bos=False):
        rows = [([self.bos_token_id] if add_bos else []) + [self.stoi.get(w, 3) for w in t.lower().split()][: max_length - 2]
                + [self.eos_token_id] for t in texts]
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([r + [self.pad_token_id] * (width - len(r)) for r in rows])
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}

    def decode(self, ids):
        return " ".join(self.itos[i] for i in ids if i > 3)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=0.1, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead, dropout=0.1, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, memory, future, tgt_pad, src_pad):
        x = self.norm1(x + self.self_attn(x, x, x, attn_mask=future, key_padding_mask=tgt_pad, need_weights=False)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, key_padding_mask=src_pad, need_weights=False)[0])
        return self.norm3(x + self.ff(x))


class Doc2Query(nn.Module):
    def __init__(self, vocab_size, d_model=64, nhead=4, layers=2):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(64, d_model)
        enc_layer = nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, layers, enable_nested_tensor=False)
        self.decoder = nn.ModuleList(DecoderLayer(d_model, nhead) for _ in range(layers))
        self.lm_head = nn.Linear(d_model, vocab_size)

    @staticmethod
    def generate_future_mask(sz, device=None):
        return torch.tril(torch.ones(sz, sz, dtype=torch.bool, device=device))  # expect: MC521 triangle

    def embed_tokens(self, ids):
        return self.embed(ids) * math.sqrt(self.d_model) + self.pos(torch.arange(ids.size(1), device=ids.device))

    def encode(self, input_ids, attention_mask):
        return self.encoder(self.embed_tokens(input_ids), src_key_padding_mask=attention_mask == 0)

    def decode(self, decoder_input_ids, memory, attention_mask):
        y = self.embed_tokens(decoder_input_ids)
        future = self.generate_future_mask(decoder_input_ids.size(1), y.device)
        tgt_pad = decoder_input_ids == 0
        for layer in self.decoder:
            y = layer(y, memory, future, tgt_pad, attention_mask == 0)
        return self.lm_head(y)

    def forward(self, input_ids, attention_mask, labels):
        memory = self.encode(input_ids, attention_mask)
        logits = self.decode(labels[:, :-1], memory, attention_mask)
        return F.cross_entropy(logits.transpose(1, 2), labels[:, 1:], ignore_index=0)


@torch.no_grad()
def sample_queries(model, tok, passage, num_samples=3, top_k=10, temperature=1.0, max_len=8):
    model.eval()
    enc = tok([passage] * num_samples)
    memory = model.encode(enc["input_ids"], enc["attention_mask"])
    out = torch.full((num_samples, 1), tok.bos_token_id)
    for _ in range(max_len):
        logits = model.decode(out, memory, enc["attention_mask"])[:, -1]
        values, indices = logits.topk(top_k, dim=-1)
        gumbel = -torch.log(-torch.log(torch.rand_like(values).clamp(1e-9, 1.0)))
        nxt = indices.gather(1, (values / temperature + gumbel).argmax(-1, keepdim=True))
        out = torch.cat([out, nxt], dim=1)
    return [tok.decode(row.tolist()[1:]) for row in out]


def bm25(query, docs, k1=0.9, b=0.4):
    tfs = [Counter(d.split()) for d in docs]
    avgdl = sum(len(d.split()) for d in docs) / len(docs)
    scores = []
    for tf, d in zip(tfs, docs):
        s = 0.0
        for w in query.split():
            df = sum(w in t for t in tfs)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            s += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(d.split()) / avgdl))
        scores.append(round(s, 3))
    return scores


if __name__ == "__main__":
    torch.manual_seed(0)
    pairs = [("the giant panda eats bamboo and lives in the mountains of central china", "what do pandas eat"),
             ("insulin is a hormone made by the pancreas that regulates blood sugar", "which organ makes insulin"),
             ("the treaty of versailles was signed in 1919 ending the first world war", "when was the treaty of versailles signed")]
    tok = Doc2QueryTokenizer(" ".join(p + " " + q for p, q in pairs).split())
    model = Doc2Query(len(tok.itos))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    src = tok([p for p, _ in pairs])
    labels = tok([q for _, q in pairs], add_bos=True)["input_ids"]
    for step in range(30):
        model.train()
        loss = model(src["input_ids"], src["attention_mask"], labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("loss", round(loss.item(), 4))
    expanded = [p + " " + " ".join(sample_queries(model, tok, p)) for p, _ in pairs]
    print(expanded[0])
    print("bm25 plain   ", bm25("what do pandas eat", [p for p, _ in pairs]))
    print("bm25 expanded", bm25("what do pandas eat", expanded))
