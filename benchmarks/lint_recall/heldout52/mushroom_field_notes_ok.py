"""Genus of a mushroom from a forager's field notes.

Notes such as "white gills free, ring on stem, volva at base" are tokenised
word by word, padded to the batch, and read by a small encoder whose layers
are described by a dict.  The attention call is kept as a module-level alias
so that the layers can be tested with a reference implementation.

Source: conventions.md sections 2.6 and 5.
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange

sdpa = F.scaled_dot_product_attention

GENERA = {
    "amanita": ["white gills free", "ring on stem", "volva at base", "warts on cap", "white spore print"],
    "boletus": ["pores not gills", "thick bulbous stem", "net pattern on stem", "brown cap", "olive spore print"],
    "cantharellus": ["false gills forked", "funnel shaped cap", "apricot smell", "yellow flesh", "pale spore print"],
    "coprinus": ["gills turn black", "shaggy scales", "cap dissolves to ink", "tall white cap", "black spore print"],
    "pleurotus": ["grows on wood", "shelf shaped cap", "decurrent gills", "no stem or short stem", "lilac spore print"],
}
FILLER = ["found", "near", "oak", "birch", "after", "rain", "in", "moss", "single", "cluster", "of", "three"]
VOCAB = {w: i + 1 for i, w in enumerate(sorted({w for ps in GENERA.values() for p in ps for w in p.split()} | set(FILLER)))}
LAYOUT = {"dim": 48, "heads": 4, "depth": 2, "max_len": 24, "batch_size": 24}


class NoteLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, keep):
        q, k, v = rearrange(self.qkv(self.ln1(x)), "b n (c h d) -> c b h n d", c=3, h=self.heads)
        x = x + self.o(rearrange(sdpa(q, k, v, keep[:, None, None, :]), "b h n d -> b n (h d)"))
        return x + self.ff(self.ln2(x))


class NoteClassifier(nn.Module):
    def __init__(self, dim, heads, depth, max_len, **_):
        super().__init__()
        self.tok = nn.Embedding(len(VOCAB) + 1, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList(NoteLayer(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, len(GENERA))

    def forward(self, ids):
        keep = ids != 0
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
        for layer in self.layers:
            x = layer(x, keep)
        w = keep.unsqueeze(-1).float()
        return self.head((x * w).sum(1) / w.sum(1))


def write_note(rng):
    genus = rng.randrange(len(GENERA))
    phrases = rng.sample(list(GENERA.values())[genus], rng.randint(1, 3))
    words = " ".join(phrases).split() + rng.sample(FILLER, rng.randint(0, 4))
    return words, genus


def encode(notes, max_len):
    ids = torch.zeros(len(notes), max_len, dtype=torch.long)
    for row, words in enumerate(notes):
        ids[row, : min(len(words), max_len)] = torch.tensor([VOCAB[w] for w in words][:max_len])
    return ids


def main():
    rng = random.Random(6)
    torch.manual_seed(6)
    model = NoteClassifier(**LAYOUT)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(150):
        notes = [write_note(rng) for _ in range(LAYOUT["batch_size"])]
        ids = encode([w for w, _ in notes], LAYOUT["max_len"])
        loss = F.cross_entropy(model(ids), torch.tensor([g for _, g in notes]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    hits = 0
    with torch.no_grad():
        for _ in range(10):
            notes = [write_note(rng) for _ in range(LAYOUT["batch_size"])]
            pred = model(encode([w for w, _ in notes], LAYOUT["max_len"])).argmax(-1)
            hits += (pred == torch.tensor([g for _, g in notes])).sum().item()
    print(f"loss {loss.item():.3f}  genus accuracy {hits / (10 * LAYOUT['batch_size']):.3f}")
    basket = ["gills turn black shaggy scales found near oak", "pores not gills brown cap", "grows on wood in cluster of three"]
    with torch.no_grad():
        pred = model(encode([n.split() for n in basket], LAYOUT["max_len"])).argmax(-1)
    print([list(GENERA)[i] for i in pred.tolist()])


if __name__ == "__main__":
    main()
