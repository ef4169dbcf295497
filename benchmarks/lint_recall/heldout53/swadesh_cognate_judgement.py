"""Automatic cognate judgement on Swadesh-list word pairs from related languages.

Word forms are transcribed in IPA and reduced to Dolgopolsky-style sound classes (as in
LingPy's wordlists: concept, doculect, form); a shared segment encoder embeds each form and a
pair of forms for the same concept is judged cognate from the two embeddings, the way
expert cognate sets are coded in comparative databases.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md
section 3, item 21).
"""

import argparse
import math
import random

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

SOUND_CLASSES = ["<pad>", "P", "T", "K", "S", "M", "N", "R", "W", "J", "H", "V"]
PAD = 0
VOWELS = [11]
CONSONANTS = list(range(1, 11))
LANGUAGES = ["Proto", "Lang_A", "Lang_B", "Lang_C", "Lang_D"]


def simulate_wordlist(n_concepts, rng):
    shifts = {lang: {c: rng.choice(CONSONANTS) if rng.random() < 0.25 else c for c in CONSONANTS}
              for lang in LANGUAGES[1:]}
    rows = []
    for concept in range(n_concepts):
        proto = [rng.choice(CONSONANTS) if i % 2 == 0 else VOWELS[0] for i in range(rng.integers(2, 9))]
        for lang in LANGUAGES[1:]:
            if rng.random() < 0.3:
                form = [rng.choice(CONSONANTS) if i % 2 == 0 else VOWELS[0] for i in range(rng.integers(2, 9))]
                cogid = f"{concept}-{lang}"
            else:
                form = [shifts[lang].get(s, s) for s in proto]
                if rng.random() < 0.3 and len(form) > 2:
                    form = form[:-1]
                cogid = f"{concept}-0"
            rows.append(dict(concept=concept, doculect=lang, form=form, cogid=cogid))
    return pd.DataFrame(rows)


def make_pairs(wordlist):
    pairs = []
    for _, g in wordlist.groupby("concept"):
        g = g.to_dict("records")
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                pairs.append((g[i]["form"], g[j]["form"], float(g[i]["cogid"] == g[j]["cogid"])))
    return pairs


def pad_forms(forms, max_len=10):
    ids = np.full((len(forms), max_len), PAD, dtype=np.int64)
    for i, f in enumerate(forms):
        ids[i, : len(f)] = f
    return torch.from_numpy(ids)


def segment_mask(ids):
    return (ids != PAD).unsqueeze(1).unsqueeze(3)  # expect: MC514 helper


class SegmentAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        B, L, D = x.shape
        q, k, v = (t.view(B, L, self.h, self.dk).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)  # also: MC514
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, D))


class FormEncoder(nn.Module):
    def __init__(self, d_model=32, n_heads=4, max_len=10):
        super().__init__()
        self.seg = nn.Embedding(len(SOUND_CLASSES), d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        self.att = nn.ModuleList([SegmentAttention(d_model, n_heads) for _ in range(2)])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2)])

    def forward(self, ids):
        mask = segment_mask(ids)
        h = self.seg(ids) + self.pos(torch.arange(ids.shape[1]))
        for att, norm in zip(self.att, self.norms):
            h = norm(h + att(h, mask))
        keep = (ids != PAD).float()[..., None]
        return F.normalize((h * keep).sum(1) / keep.sum(1), dim=-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--concepts", type=int, default=207)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    pairs = make_pairs(simulate_wordlist(args.concepts, rng))
    random.shuffle(pairs)
    n_train = int(0.8 * len(pairs))
    encoder = FormEncoder()
    scale = nn.Parameter(torch.tensor(5.0))
    opt = torch.optim.Adam(list(encoder.parameters()) + [scale], lr=2e-3)
    for epoch in range(args.epochs):
        for start in range(0, n_train, 64):
            a, b, y = zip(*pairs[start : start + 64])
            sim = (encoder(pad_forms(a)) * encoder(pad_forms(b))).sum(-1)
            loss = F.binary_cross_entropy_with_logits(scale * sim - scale / 2, torch.tensor(y))
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        a, b, y = zip(*pairs[n_train:])
        sim = (encoder(pad_forms(a)) * encoder(pad_forms(b))).sum(-1)
        acc = ((sim > 0.5).float() == torch.tensor(y)).float().mean().item()
    print(f"cognate accuracy on held-out pairs {acc:.3f}")


if __name__ == "__main__":
    main()
