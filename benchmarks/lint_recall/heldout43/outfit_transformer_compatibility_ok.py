"""Outfit compatibility prediction and fill-in-the-blank on Polyvore-style outfits.

An OutfitTransformer-style model: each item is its precomputed image feature plus a category
embedding, a set transformer (nn.TransformerEncoder, no positions) over the items of an outfit,
attention pooling into one outfit embedding and a compatibility head trained with BCE against
outfits whose items were resampled at random; evaluated by compatibility AUC and FITB accuracy
with four same-category candidates.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险)
"""
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORIES = ["tops", "bottoms", "shoes", "bags", "jewellery", "outerwear", "hats"]
FEAT_DIM = 48
N_STYLES = 10


@dataclass
class Item:
    item_id: int
    category: int
    style: int
    feature: torch.Tensor


@dataclass
class OutfitBatch:
    features: torch.Tensor
    categories: torch.Tensor
    item_keep: torch.Tensor
    labels: torch.Tensor


def build_catalogue(n_items, g):
    style_basis = torch.randn(N_STYLES, FEAT_DIM, generator=g)
    cat_basis = torch.randn(len(CATEGORIES), FEAT_DIM, generator=g)
    items = []
    for i in range(n_items):
        c = int(torch.randint(len(CATEGORIES), (1,), generator=g))
        s = int(torch.randint(N_STYLES, (1,), generator=g))
        feat = 0.5 * style_basis[s] + cat_basis[c] + 1.0 * torch.randn(FEAT_DIM, generator=g)
        items.append(Item(i, c, s, feat))
    return items


def sample_outfits(items, n, rng):
    by_style_cat = {}
    for it in items:
        by_style_cat.setdefault((it.style, it.category), []).append(it)
    outfits = []
    for _ in range(n):
        style = rng.randrange(N_STYLES)
        cats = rng.sample([0, 1, 2] + rng.sample(range(3, len(CATEGORIES)), 3), rng.randint(3, 6))
        outfits.append([rng.choice(by_style_cat[(style, c)]) for c in cats if (style, c) in by_style_cat])
    return [o for o in outfits if len(o) >= 3]


def corrupt(outfit, items, rng):
    return [rng.choice([it for it in items if it.category == o.category]) for o in outfit]


def collate(outfits, labels):
    max_items = max(len(o) for o in outfits)
    feats = torch.zeros(len(outfits), max_items, FEAT_DIM)
    cats = torch.zeros(len(outfits), max_items, dtype=torch.long)
    keep = torch.zeros(len(outfits), max_items, dtype=torch.bool)
    for b, outfit in enumerate(outfits):
        for j, it in enumerate(outfit):
            feats[b, j], cats[b, j], keep[b, j] = it.feature, it.category, True
    return OutfitBatch(feats, cats, keep, torch.tensor(labels, dtype=torch.float))


class AttentionPooling(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.score = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Linear(d_model, 1))

    def forward(self, h, keep):
        alpha = torch.softmax(self.score(h).squeeze(-1), dim=1)
        alpha = alpha.masked_fill(~keep, 0.0)
        alpha = alpha / alpha.sum(dim=1, keepdim=True).clamp_min(1e-6)
        return torch.einsum("bn,bnd->bd", alpha, h)


class OutfitTransformer(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2, dropout=0.1):
        super().__init__()
        self.item_proj = nn.Linear(FEAT_DIM, d_model)
        self.cat_embed = nn.Embedding(len(CATEGORIES), d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.pool = AttentionPooling(d_model)
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_model), nn.ReLU(),
                                  nn.Linear(d_model, 1))

    def forward(self, features, categories, item_keep):
        h = self.item_proj(features) + self.cat_embed(categories)
        h = self.encoder(h, src_key_padding_mask=~item_keep)
        return self.head(self.pool(h, item_keep)).squeeze(-1)

    def score(self, batch):
        return self(batch.features, batch.categories, batch.item_keep)


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return (pos[:, None] > neg[None, :]).float().mean().item()


@torch.no_grad()
def fitb_accuracy(model, outfits, items, rng, n_candidates=4):
    model.eval()
    correct = 0
    for outfit in outfits:
        blank = rng.randrange(len(outfit))
        same_cat = [it for it in items if it.category == outfit[blank].category
                    and it.style != outfit[blank].style]
        candidates = [outfit[blank]] + rng.sample(same_cat, n_candidates - 1)
        filled = [outfit[:blank] + [c] + outfit[blank + 1:] for c in candidates]
        scores = model.score(collate(filled, [0] * len(filled)))
        correct += int(scores.argmax().item() == 0)
    return correct / len(outfits)


def main():
    g = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    torch.manual_seed(0)
    items = build_catalogue(3000, g)
    train = sample_outfits(items, 4000, rng)
    test = sample_outfits(items, 400, rng)
    model = OutfitTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    for epoch in range(4):
        model.train()
        rng.shuffle(train)
        for start in range(0, len(train), 64):
            pos = train[start:start + 64]
            neg = [corrupt(o, items, rng) for o in pos]
            batch = collate(pos + neg, [1] * len(pos) + [0] * len(neg))
            loss = F.binary_cross_entropy_with_logits(model.score(batch), batch.labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            neg = [corrupt(o, items, rng) for o in test]
            batch = collate(test + neg, [1] * len(test) + [0] * len(neg))
            test_auc = auc(model.score(batch), batch.labels)
        print(f"epoch {epoch} loss {loss.item():.3f} compat AUC {test_auc:.3f}")
    print(f"FITB accuracy {fitb_accuracy(model, test[:200], items, rng):.3f}")


if __name__ == "__main__":
    main()
