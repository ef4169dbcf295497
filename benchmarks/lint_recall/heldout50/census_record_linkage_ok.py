"""Linking people across two historical census enumerations (genealogy notebook export).

Transcribed census entries (surname, given name, birthplace, age) are encoded character by
character, and a siamese encoder scores whether two entries from successive censuses are
the same person despite spelling drift in the enumerators' handwriting.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md section 3 item 21)
"""

# %%
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(7)
torch.manual_seed(7)

SURNAMES = ["macleod", "o'brien", "schmidt", "lindqvist", "kowalski", "dubois", "morrison", "hughes"]
GIVEN = ["mary", "john", "ellen", "patrick", "anna", "karl", "margaret", "james"]
PLACES = ["cork", "skye", "bavaria", "smaland", "galicia", "lyon"]
ALPHABET = "<abcdefghijklmnopqrstuvwxyz' 0123456789|"
PAD = 0
char2id = {c: i + 1 for i, c in enumerate(ALPHABET)}


def drift(s):
    if len(s) > 3 and random.random() < 0.5:
        i = random.randrange(1, len(s) - 1)
        s = s[:i] + random.choice("aeiouy") + s[i + 1:]
    return s


def entry(person, years_later=0):
    sur, giv, place, age = person
    return f"{drift(sur)}|{drift(giv)}|{place}|{age + years_later}"


def make_pair():
    a = (random.choice(SURNAMES), random.choice(GIVEN), random.choice(PLACES), random.randint(1, 70))
    if random.random() < 0.5:
        return entry(a), entry(a, 10), 1.0
    b = (a[0], random.choice(GIVEN), random.choice(PLACES), random.randint(1, 70))
    return entry(a), entry(b, 10), 0.0


pairs = [make_pair() for _ in range(800)]

# %%
@dataclass
class RecordBatch:
    left: torch.Tensor
    right: torch.Tensor
    labels: torch.Tensor

    @staticmethod
    def encode(texts):
        longest = max(map(len, texts))
        return torch.tensor([[char2id[c] for c in t] + [PAD] * (longest - len(t)) for t in texts])

    @staticmethod
    def key_mask(ids):
        return (ids != PAD)[:, None, None, :]

    @classmethod
    def from_pairs(cls, rows):
        return cls(cls.encode([a for a, _, _ in rows]), cls.encode([b for _, b, _ in rows]), torch.tensor([y for _, _, y in rows]))


# %%
class EntryEncoder(nn.Module):
    def __init__(self, d=48, heads=4):
        super().__init__()
        self.emb = nn.Embedding(len(ALPHABET) + 1, d, padding_idx=PAD)
        self.pos = nn.Parameter(torch.randn(64, d) * 0.02)
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads
        self.ff = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))

    def forward(self, ids):
        b, t = ids.shape
        x = self.emb(ids) + self.pos[:t]
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(RecordBatch.key_mask(ids) == 0, torch.finfo(scores.dtype).min)
        x = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        keep = (ids != PAD).unsqueeze(-1).float()
        return self.ff((x * keep).sum(1) / keep.sum(1))


encoder = EntryEncoder()
scale = nn.Parameter(torch.tensor(5.0))
opt = torch.optim.Adam(list(encoder.parameters()) + [scale], lr=3e-3)

# %%
for epoch in range(5):
    random.shuffle(pairs)
    for i in range(0, 640, 32):
        batch = RecordBatch.from_pairs(pairs[i:i + 32])
        sim = F.cosine_similarity(encoder(batch.left), encoder(batch.right)) * scale
        loss = F.binary_cross_entropy_with_logits(sim, batch.labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 4))

# %%
test = RecordBatch.from_pairs(pairs[640:])
with torch.no_grad():
    sim = F.cosine_similarity(encoder(test.left), encoder(test.right)) * scale
print("link accuracy", ((sim > 0).float() == test.labels).float().mean().item())
