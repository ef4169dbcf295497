"""Accord tags for perfume reviews (exported from a Kaggle-style Jupyter notebook).

Community reviews of fragrances are tagged with the main accords (woody, citrus, floral,
amber, green) voted on the fragrance's page, as a multi-label target for a small encoder.

Source: conventions.md section 2.3 and section 5 item 5; TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20)
"""

# %%
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(8)
torch.manual_seed(8)

ACCORDS = {
    "woody": ["cedar", "sandalwood", "vetiver", "oud"],
    "citrus": ["bergamot", "lemon", "grapefruit", "neroli"],
    "floral": ["rose", "jasmine", "iris", "tuberose"],
    "amber": ["vanilla", "labdanum", "benzoin", "tonka"],
    "green": ["galbanum", "fig", "tomato leaf", "grass"],
}
COMMON = ["opens", "with", "dries", "down", "to", "a", "soft", "strong", "heart", "of", "lovely", "projection", "sillage"]


@dataclass
class Config:
    max_len: int = 40
    d_model: int = 48
    n_heads: int = 4
    mask_value: float = -1e-9  # expect: MC516 dataclass
    epochs: int = 6


cfg = Config()

# %%
def write_review():
    labels = [a for a in ACCORDS if random.random() < 0.3] or [random.choice(list(ACCORDS))]
    words = []
    for a in labels:
        words += random.sample(COMMON, 3) + random.choice(ACCORDS[a]).split()
    return words, torch.tensor([float(a in labels) for a in ACCORDS])


reviews = [write_review() for _ in range(600)]
vocab = {"[PAD]": 0}
for words, _ in reviews:
    for w in words:
        vocab.setdefault(w, len(vocab))


def encode(batch):
    ids = torch.zeros(len(batch), cfg.max_len, dtype=torch.long)
    for i, (words, _) in enumerate(batch):
        ids[i, : len(words)] = torch.tensor([vocab[w] for w in words][: cfg.max_len])
    return ids, ids != 0, torch.stack([y for _, y in batch])


# %%
class ReviewEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(len(vocab), cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.classifier = nn.Linear(cfg.d_model, len(ACCORDS))

    def forward(self, ids, keep):
        b, t = ids.shape
        h = self.embed(ids)
        q, k, v = self.qkv(h).view(b, t, 3, self.cfg.n_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~keep[:, None, None, :], self.cfg.mask_value)  # also: MC516
        h = h + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))
        return self.classifier(h[:, 0])


model = ReviewEncoder(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

# %%
for epoch in range(cfg.epochs):
    random.shuffle(reviews)
    for i in range(0, 480, 32):
        ids, keep, y = encode(reviews[i:i + 32])
        loss = F.binary_cross_entropy_with_logits(model(ids, keep), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(epoch, round(loss.item(), 4))

# %%
ids, keep, y = encode(reviews[480:])
with torch.no_grad():
    pred = model(ids, keep) > 0
print("accord F1", (2 * (pred & y.bool()).sum() / (pred.sum() + y.sum())).item())
