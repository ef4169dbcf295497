"""Automatic interlinear glossing for a documentation corpus of an endangered language.

Notebook from a language documentation project: field transcripts are segmented into
morphemes by the community linguists, and a small tagger proposes the gloss line
(STEM, PL, ERG, ...) for each morpheme, in the SIGMORPHON 2023 glossing task setting.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask)
"""

# %%
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(1)
torch.manual_seed(1)

STEMS = [f"st{i}" for i in range(40)]
AFFIXES = {"-ni": "PL", "-ra": "ERG", "-qo": "PST", "-li": "DAT", "-ma": "NEG"}
TAGS = ["<pad>", "STEM", "PL", "ERG", "PST", "DAT", "NEG", "INCORP"]
tag2id = {t: i for i, t in enumerate(TAGS)}
morph2id = {"<pad>": 0}
for m in STEMS + list(AFFIXES):
    morph2id.setdefault(m, len(morph2id))

# %%
def make_sentence():
    morphs, tags, word_ids = [], [], []
    for w in range(random.randint(2, 5)):
        n_stems = 2 if random.random() < 0.2 else 1
        for s in range(n_stems):
            morphs.append(random.choice(STEMS))
            tags.append("INCORP" if s == 0 and n_stems == 2 else "STEM")
            word_ids.append(w)
        for affix in random.sample(list(AFFIXES), random.randint(0, 2)):
            morphs.append(affix)
            tags.append(AFFIXES[affix])
            word_ids.append(w)
    return morphs, tags, word_ids


corpus = [make_sentence() for _ in range(400)]


def word_block_mask(word_ids):
    n = word_ids.numel()
    mask = torch.full((n, n), float("-inf"))
    start = 0
    for length in torch.unique_consecutive(word_ids, return_counts=True)[1].tolist():
        mask[start:start + length, start:start + length] = 0
        start += length
    return mask


def batchify(sentences):
    longest = max(len(m) for m, _, _ in sentences)
    ids = torch.zeros(len(sentences), longest, dtype=torch.long)
    labels = torch.zeros(len(sentences), longest, dtype=torch.long)
    words = torch.full((len(sentences), longest), -1)
    for i, (m, t, w) in enumerate(sentences):
        ids[i, : len(m)] = torch.tensor([morph2id[x] for x in m])
        labels[i, : len(t)] = torch.tensor([tag2id[x] for x in t])
        words[i, : len(w)] = torch.tensor(w)
    blocks = torch.stack([word_block_mask(w) for w in words])
    return ids, labels, blocks


# %%
class LocalAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, blocks):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1)) + blocks
        return x + self.proj(scores.softmax(dim=-1) @ v)


class Glosser(nn.Module):
    def __init__(self, n_morphs, n_tags, d=48):
        super().__init__()
        self.embed = nn.Embedding(n_morphs, d)
        self.local = LocalAttention(d)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, n_tags))

    def forward(self, ids, blocks):
        return self.head(self.local(self.embed(ids), blocks))


glosser = Glosser(len(morph2id), len(TAGS))
optimizer = torch.optim.Adam(glosser.parameters(), lr=3e-3)

# %%
for epoch in range(8):
    random.shuffle(corpus)
    for i in range(0, 320, 16):
        ids, labels, blocks = batchify(corpus[i:i + 16])
        logits = glosser(ids, blocks)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, round(loss.item(), 4))

# %%
ids, labels, blocks = batchify(corpus[320:])
with torch.no_grad():
    pred = glosser(ids, blocks).argmax(-1)
real = labels != 0
print("gloss accuracy:", ((pred == labels) & real).sum().item() / real.sum().item())
