"""XBRL concept tagging of numeric facts in annual-report sentences (FiNER-139 style).

Sentences from 10-K filings are tokenised with numbers kept as magnitude
buckets; an encoder tags each numeric token with the US-GAAP concept it
reports, or O. The production job tags whole filings with a bfloat16 copy of
the model.

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19), §2.3
"""

import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

CONCEPTS = ("O", "us-gaap:Revenues", "us-gaap:NetIncomeLoss", "us-gaap:LongTermDebt", "us-gaap:EffectiveIncomeTaxRatePercent")
NEG_INF = torch.finfo(torch.float32).min  # expect: MC517 constant

PATTERNS = [
    ("total revenues increased to $ {n} million in fiscal {y} compared with $ {n} million", 1),
    ("net income for the year ended december 31 , {y} was $ {n} million", 2),
    ("we recorded a net loss of $ {n} million in {y}", 2),
    ("as of december 31 , {y} , long-term debt outstanding was $ {n} million", 3),
    ("our effective tax rate was {n} % for {y} , compared to {n} % in the prior year", 4),
    ("revenue from contracts with customers was $ {n} million , of which $ {n} million was deferred", 1),
]


def number_token(value):
    return f"[NUM{min(int(math.log10(max(value, 1))), 6)}]"


def make_sentences(n, seed=0):
    rng = random.Random(seed)
    data = []
    for _ in range(n):
        pattern, concept = rng.choice(PATTERNS)
        words, tags = [], []
        for w in pattern.split():
            if w == "{n}":
                words.append(number_token(rng.uniform(5, 40) if concept == 4 else rng.uniform(10, 90000)))
                tags.append(concept)
            elif w == "{y}":
                words.append(number_token(rng.randint(2015, 2026)))
                tags.append(0)
            else:
                words.append(w)
                tags.append(0)
        data.append((words, tags))
    return data


class FilingTokenizer:
    def __init__(self, sentences):
        vocab = sorted({w for words, _ in sentences for w in words})
        self.index = {w: i + 2 for i, w in enumerate(vocab)}

    def __call__(self, batch):
        n = max(len(words) for words, _ in batch)
        ids = torch.zeros(len(batch), n, dtype=torch.long)
        tags = torch.full((len(batch), n), -100)
        for i, (words, t) in enumerate(batch):
            ids[i, : len(words)] = torch.tensor([self.index.get(w, 1) for w in words])
            tags[i, : len(t)] = torch.tensor(t)
        return ids, ids != 0, tags


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.in_proj(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~keep[:, None, None, :], NEG_INF)  # also: MC517
        probs = self.dropout(scores.softmax(dim=-1))
        return self.out_proj(torch.matmul(probs, v).transpose(1, 2).reshape(b, n, d))


class FactTagger(nn.Module):
    def __init__(self, vocab_size, dim=64, heads=4, layers=2, max_len=48):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        self.attn = nn.ModuleList(MultiHeadSelfAttention(dim, heads) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(layers))
        self.ln_attn = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.ln_ffn = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.classifier = nn.Linear(dim, len(CONCEPTS))

    def forward(self, ids, keep):
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for attn, ffn, ln1, ln2 in zip(self.attn, self.ffn, self.ln_attn, self.ln_ffn):
            x = ln1(x + attn(x, keep))
            x = ln2(x + ffn(x))
        return self.classifier(x)


@torch.no_grad()
def micro_f1(model, batches):
    model.eval()
    tp = fp = fn = 0
    for ids, keep, tags in batches:
        pred = model(ids, keep).float().argmax(-1)
        real = tags != -100
        tp += ((pred == tags) & (tags > 0) & real).sum().item()
        fp += ((pred != tags) & (pred > 0) & real).sum().item()
        fn += ((pred != tags) & (tags > 0) & real).sum().item()
    return 2 * tp / max(2 * tp + fp + fn, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    train, test = make_sentences(1500, seed=1), make_sentences(300, seed=2)
    tokenizer = FilingTokenizer(train)
    test_batches = [tokenizer(test[i : i + 50]) for i in range(0, len(test), 50)]
    model = FactTagger(len(tokenizer.index) + 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        model.train()
        random.Random(epoch).shuffle(train)
        for i in range(0, len(train), 32):
            ids, keep, tags = tokenizer(train[i : i + 32])
            loss = F.cross_entropy(model(ids, keep).flatten(0, 1), tags.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f} micro-F1 {micro_f1(model, test_batches):.3f}")
    if args.bf16:
        model.to(torch.bfloat16)
        print(f"bfloat16 filing job micro-F1 {micro_f1(model, test_batches):.3f}")


if __name__ == "__main__":
    main()
