"""Two-tower candidate retrieval with in-batch negatives and logQ correction.

The query tower mean-pools the user's recent watch history (padded with item 0) together with
context features, the item tower embeds id and genre, and training uses the batch's positives as
each other's negatives with the sampling-bias correction of Yi et al. (RecSys 2019). Item
frequencies come from a streaming estimator. With ``remove_accidental_hits`` the columns that
hold the row's own positive item again are taken out of the softmax.

Source: conventions.md section 1 (direction cheat-sheet) and section 5 item 1 (inverting a bool
mask); seed self_attention_mask_guide.txt section 7 Q5 (bool / float conversions).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RetrievalConfig:
    num_items: int = 80
    num_genres: int = 6
    num_countries: int = 5
    dim: int = 16
    history_len: int = 6
    temperature: float = 0.05
    remove_accidental_hits: bool = False
    hash_buckets: int = 128


class StreamingFrequencyEstimator:
    def __init__(self, buckets, alpha=0.05):
        self.alpha = alpha
        self.last_step = torch.zeros(buckets)
        self.delta = torch.ones(buckets)
        self.buckets = buckets

    def update(self, item_ids, step):
        h = item_ids % self.buckets
        self.delta[h] = (1 - self.alpha) * self.delta[h] + self.alpha * (step - self.last_step[h])
        self.last_step[h] = float(step)

    def log_prob(self, item_ids):
        return -torch.log(self.delta[item_ids % self.buckets].clamp(min=1.0))


def masked_mean(x, keep):
    w = keep.unsqueeze(-1).to(x.dtype)
    return (x * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)


class QueryTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.item_emb = nn.Embedding(cfg.num_items, cfg.dim, padding_idx=0)
        self.country_emb = nn.Embedding(cfg.num_countries, cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(2 * cfg.dim + 1, 64), nn.ReLU(), nn.Linear(64, cfg.dim))

    def forward(self, history, country, hour):
        keep = history != 0
        hist = masked_mean(self.item_emb(history), keep)
        x = torch.cat([hist, self.country_emb(country), hour.unsqueeze(-1) / 24.0], dim=-1)
        return F.normalize(self.mlp(x), dim=-1)


class ItemTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.item_emb = nn.Embedding(cfg.num_items, cfg.dim)
        self.genre_emb = nn.Embedding(cfg.num_genres, cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(2 * cfg.dim, 64), nn.ReLU(), nn.Linear(64, cfg.dim))

    def forward(self, item_id, genre):
        x = torch.cat([self.item_emb(item_id), self.genre_emb(genre)], dim=-1)
        return F.normalize(self.mlp(x), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, cfg: RetrievalConfig):
        super().__init__()
        self.cfg = cfg
        self.query_tower = QueryTower(cfg)
        self.item_tower = ItemTower(cfg)
        self.freq = StreamingFrequencyEstimator(cfg.hash_buckets)

    def in_batch_logits(self, q, c, item_ids):
        logits = q @ c.t() / self.cfg.temperature
        logits = logits - self.freq.log_prob(item_ids)[None, :]
        if self.cfg.remove_accidental_hits:
            logits = self.remove_accidental_hits(logits, item_ids)
        return logits

    def remove_accidental_hits(self, logits, item_ids):
        hits = item_ids[None, :] == item_ids[:, None]
        hits.fill_diagonal_(False)
        keep = 1 - hits  # expect: MC512 subtract
        return torch.where(keep.bool(), logits, torch.finfo(logits.dtype).min)

    def forward(self, batch, step=0):
        q = self.query_tower(batch["history"], batch["country"], batch["hour"])
        c = self.item_tower(batch["item_id"], batch["genre"])
        self.freq.update(batch["item_id"], step)
        logits = self.in_batch_logits(q, c, batch["item_id"])
        labels = torch.arange(logits.size(0), device=logits.device)
        weights = batch.get("reward", torch.ones_like(logits[:, 0]))
        return (F.cross_entropy(logits, labels, reduction="none") * weights).mean()

    @torch.no_grad()
    def retrieve(self, batch, catalog_ids, catalog_genres, k=5):
        q = self.query_tower(batch["history"], batch["country"], batch["hour"])
        c = self.item_tower(catalog_ids, catalog_genres)
        scores = q @ c.t()
        seen = (batch["history"][:, :, None] == catalog_ids[None, None, :]).any(dim=1)
        scores = scores.masked_fill(seen, float("-inf"))
        return catalog_ids[scores.topk(k, dim=-1).indices]


def sample_batch(cfg, batch_size=8, generator=None):
    lens = torch.randint(0, cfg.history_len + 1, (batch_size,), generator=generator)
    hist = torch.randint(1, cfg.num_items, (batch_size, cfg.history_len), generator=generator)
    hist = hist * (torch.arange(cfg.history_len)[None, :] < lens[:, None])
    item = torch.randint(1, cfg.num_items, (batch_size,), generator=generator)
    item[1] = item[0]
    return {"history": hist, "country": torch.randint(0, cfg.num_countries, (batch_size,), generator=generator),
            "hour": torch.randint(0, 24, (batch_size,), generator=generator).float(),
            "item_id": item, "genre": item % cfg.num_genres,
            "reward": torch.rand(batch_size, generator=generator) + 0.5}


if __name__ == "__main__":
    torch.manual_seed(1)
    cfg = RetrievalConfig()
    model = TwoTower(cfg)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    for step in range(1, 5):
        batch = sample_batch(cfg)
        loss = model(batch, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    catalog = torch.arange(1, cfg.num_items)
    top = model.retrieve(batch, catalog, catalog % cfg.num_genres)
    print("loss %.4f  retrieved %s" % (loss.item(), top[0].tolist()))
