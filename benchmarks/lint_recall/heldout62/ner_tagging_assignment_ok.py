"""NLP 201, Assignment 3 (part B): named-entity recognition with a Transformer encoder.

Published solution, exported from the course notebook. Sentences in the CoNLL-2003
style are generated from templates (people, places and organisations, BIO tags),
a word-level tokenizer with the same call signature as a Hugging Face tokenizer
turns them into ``input_ids`` / ``attention_mask``, and a two-layer pre-norm
encoder built on ``nn.MultiheadAttention`` tags every word. The grader checks
entity-level F1 on the held-out split.

Source: conventions.md §1 (direction cheat-sheet; nn.MultiheadAttention and HF attention_mask rows), §5 item 1; seed self_attention_mask_guide.txt §2, §7 Q1
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Maria", "Tomas", "Li Wei", "Noor Khan"]
PLACES = ["Paris", "New York", "Lagos", "Kyoto", "Sao Paulo", "Berlin", "Lima"]
ORGS = ["the United Nations", "Acme Corp", "Reuters", "the World Bank", "Siemens", "FIFA"]
TEMPLATES = [
    "{PER} visited {LOC} last week",
    "{PER} joined {ORG} in {LOC}",
    "{ORG} opened an office in {LOC}",
    "according to {ORG} , {PER} will speak",
    "{PER} met {PER} at the {LOC} summit",
    "shares of {ORG} fell on Monday",
    "the mayor of {LOC} thanked {PER}",
]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
TAG_ID = {t: i for i, t in enumerate(TAGS)}


def make_sentence(rng):
    words, tags = [], []
    for piece in rng.choice(TEMPLATES).split():
        if piece.startswith("{"):
            kind = piece[1:4]
            pool = {"PER": PEOPLE, "LOC": PLACES, "ORG": ORGS}[kind]
            entity = rng.choice(pool).split()
            words += entity
            tags += ["B-" + kind] + ["I-" + kind] * (len(entity) - 1)
        else:
            words.append(piece)
            tags.append("O")
    return words, tags


class WordTokenizer:
    def __init__(self, corpus):
        self.vocab = {"[PAD]": 0, "[UNK]": 1}
        for words, _ in corpus:
            for w in words:
                self.vocab.setdefault(w.lower(), len(self.vocab))

    def __len__(self):
        return len(self.vocab)

    def __call__(self, batch_words, padding=True, return_tensors="pt"):
        ids = [[self.vocab.get(w.lower(), 1) for w in words] for words in batch_words]
        width = max(len(x) for x in ids)
        input_ids = torch.zeros(len(ids), width, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def encode_tags(batch_tags, width):
    labels = torch.full((len(batch_tags), width), -100, dtype=torch.long)
    for i, tags in enumerate(batch_tags):
        labels[i, : len(tags)] = torch.tensor([TAG_ID[t] for t in tags])
    return labels


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, attention_mask):
        h = self.norm1(x)
        a, _ = self.self_attn(h, h, h, key_padding_mask=~attention_mask, need_weights=False)
        x = x + self.drop(a)
        return x + self.drop(self.ff(self.norm2(x)))


class NERTagger(nn.Module):
    def __init__(self, vocab_size, n_tags, d_model=64, n_heads=4, n_layers=2, max_len=64, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, 4 * d_model, dropout) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, n_tags)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.tok(input_ids) + self.pos(positions)[None]
        mask = attention_mask.bool()
        for layer in self.layers:
            x = layer(x, mask)
        return self.out(self.norm(x))


def spans(tags):
    found, start, kind = set(), None, None
    for i, t in enumerate(tags + ["O"]):
        if start is not None and not (t.startswith("I-") and t[2:] == kind):
            found.add((start, i, kind))
            start = None
        if t.startswith("B-"):
            start, kind = i, t[2:]
    return found


def entity_f1(model, tokenizer, data, batch_size=64):
    model.eval()
    tp = n_pred = n_gold = 0
    with torch.no_grad():
        for s in range(0, len(data), batch_size):
            chunk = data[s : s + batch_size]
            enc = tokenizer([w for w, _ in chunk], padding=True, return_tensors="pt")
            pred = model(enc["input_ids"], enc["attention_mask"]).argmax(-1)
            for i, (words, gold) in enumerate(chunk):
                guess = [TAGS[j] for j in pred[i, : len(words)].tolist()]
                g, p = spans(gold), spans(guess)
                tp += len(g & p)
                n_pred += len(p)
                n_gold += len(g)
    precision = tp / max(n_pred, 1)
    recall = tp / max(n_gold, 1)
    return 2 * precision * recall / max(precision + recall, 1e-9)


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train = [make_sentence(rng) for _ in range(600)]
    test = [make_sentence(rng) for _ in range(150)]
    tokenizer = WordTokenizer(train)
    print("vocabulary size:", len(tokenizer))
    print("example:", list(zip(*train[0])))

    enc = tokenizer([w for w, _ in train[:3]], padding=True, return_tensors="pt")
    print("input_ids:\n", enc["input_ids"])
    print("attention_mask:\n", enc["attention_mask"])
    assert enc["input_ids"].shape == enc["attention_mask"].shape

    model = NERTagger(len(tokenizer), len(TAGS))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    print("F1 before training: %.3f" % entity_f1(model, tokenizer, test))
    for epoch in range(5):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for s in range(0, len(train), 32):
            chunk = train[s : s + 32]
            enc = tokenizer([w for w, _ in chunk], padding=True, return_tensors="pt")
            labels = encode_tags([t for _, t in chunk], enc["input_ids"].size(1))
            logits = model(enc["input_ids"], enc["attention_mask"])
            loss = F.cross_entropy(logits.reshape(-1, len(TAGS)), labels.reshape(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: loss {total / (len(train) / 32):.4f}  test F1 {entity_f1(model, tokenizer, test):.3f}")

    words = "Grace Hopper joined Reuters in Kyoto".split()
    enc = tokenizer([words], padding=True, return_tensors="pt")
    pred = model(enc["input_ids"], enc["attention_mask"]).argmax(-1)[0]
    print(list(zip(words, [TAGS[i] for i in pred.tolist()])))


if __name__ == "__main__":
    main()
