"""Adverse drug event extraction from pharmacovigilance case narratives.

Spontaneous-report narratives (n2c2 2018 Track 2 / CADEC style) are tagged
with BIO labels for DRUG and ADE mentions by a token-classification encoder.
The tokenizer mirrors the Hugging Face call convention (input_ids and an
int64 attention_mask, 1 for real tokens).

Source: seed self_attention_mask_guide.txt (section 2, section 7 Q1); conventions.md §1 direction cheat-sheet
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

TAGS = ("O", "B-DRUG", "I-DRUG", "B-ADE", "I-ADE")
DRUGS = ["metformin", "lisinopril", "atorvastatin", "amoxicillin clavulanate", "warfarin", "sertraline", "ibuprofen"]
ADES = ["nausea", "dry cough", "muscle pain", "skin rash", "gastrointestinal bleeding", "insomnia", "dizziness"]
TEMPLATES = [
    "patient started {drug} and developed {ade} after two days",
    "reporter states {ade} occurred on {drug} therapy",
    "{drug} was discontinued due to {ade}",
    "elderly female on {drug} since march presented with {ade} and was admitted for observation",
    "{drug} was prescribed for {ind} and the patient later reported {ade}",
    "started {drug} to treat {ind} with no reaction",
    "{ind} resolved on {drug}",
]


def make_reports(n, seed=0):
    rng = random.Random(seed)
    reports = []
    for _ in range(n):
        tpl = rng.choice(TEMPLATES)
        words, tags = [], []
        for piece in tpl.split():
            if piece == "{ind}":
                span = rng.choice(ADES).split()
                words += span
                tags += ["O"] * len(span)
            elif piece in ("{drug}", "{ade}"):
                kind = "DRUG" if piece == "{drug}" else "ADE"
                span = rng.choice(DRUGS if kind == "DRUG" else ADES).split()
                words += span
                tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(span) - 1)
            else:
                words.append(piece)
                tags.append("O")
        reports.append((words, [TAGS.index(t) for t in tags]))
    return reports


class NarrativeTokenizer:
    pad_token_id, unk_token_id = 0, 1

    def __init__(self, corpus):
        vocab = sorted({w for words, _ in corpus for w in words})
        self.vocab = {w: i + 2 for i, w in enumerate(vocab)}

    def __len__(self):
        return len(self.vocab) + 2

    def __call__(self, batch_words):
        ids = [[self.vocab.get(w, self.unk_token_id) for w in words] for words in batch_words]
        n = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), n), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), n, dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def encode_batch(tokenizer, reports):
    enc = tokenizer([words for words, _ in reports])
    token_mask = enc["attention_mask"] == 0  # expect: MC511 tokenizer
    tags = torch.full(enc["input_ids"].shape, -100)
    for i, (_, t) in enumerate(reports):
        tags[i, : len(t)] = torch.tensor(t)
    return enc["input_ids"], token_mask, tags


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, token_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=token_mask[:, None, None, :])  # also: MC511
        x = x + self.o(a.transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.ln2(x))


class ADETagger(nn.Module):
    def __init__(self, vocab_size, dim=64, heads=4, layers=2, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.classifier = nn.Linear(dim, len(TAGS))

    def forward(self, input_ids, token_mask):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        for layer in self.layers:
            x = layer(x, token_mask)
        return self.classifier(self.norm(x))


@torch.no_grad()
def mention_f1(model, tokenizer, reports):
    model.eval()
    input_ids, token_mask, tags = encode_batch(tokenizer, reports)
    pred = model(input_ids, token_mask).argmax(-1)
    real = tags != -100
    tp = ((pred == tags) & (tags > 0) & real).sum().item()
    fp = ((pred != tags) & (pred > 0) & real).sum().item()
    fn = ((pred != tags) & (tags > 0) & real).sum().item()
    return 2 * tp / max(2 * tp + fp + fn, 1)


def main():
    torch.manual_seed(0)
    train, test = make_reports(800, seed=1), make_reports(200, seed=2)
    tokenizer = NarrativeTokenizer(train)
    model = ADETagger(len(tokenizer))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        random.Random(epoch).shuffle(train)
        for i in range(0, len(train), 32):
            input_ids, token_mask, tags = encode_batch(tokenizer, train[i : i + 32])
            logits = model(input_ids, token_mask)
            loss = F.cross_entropy(logits.reshape(-1, len(TAGS)), tags.reshape(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f} mention F1 {mention_f1(model, tokenizer, test):.3f}")


if __name__ == "__main__":
    main()
