"""Behavior Sequence Transformer (BST) for click-through-rate prediction.

Alibaba's BST: the user's recent behaviours and the target item are one
sequence of (item, category) embeddings plus a position embedding bucketed from
the time since each click; one transformer layer runs over it and the outputs
are pooled and concatenated with the other features for an MLP. The feature
pipeline emits the behaviour columns right-padded with id 0 and an int64
``attention_mask`` (1 = real behaviour), the way a tokenizer would.

Source: conventions.md §1 (HF 2-D attention_mask and nn.MultiheadAttention rows) and §5 item 7, tools.md §0 P2
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BSTConfig:
    n_items: int = 300
    n_cates: int = 30
    n_users: int = 80
    n_time_buckets: int = 16
    max_behaviors: int = 10
    item_dim: int = 24
    cate_dim: int = 8
    n_heads: int = 4
    n_layers: int = 1
    dropout: float = 0.1
    mlp: tuple = (64, 32)
    other_features: dict = field(default_factory=lambda: {"user": 80, "age": 8, "city": 20})

    @property
    def d_model(self) -> int:
        return self.item_dim + self.cate_dim


def bucketize_seconds(delta_seconds, n_buckets):
    hours = delta_seconds.clamp(min=1).float() / 3600.0
    return torch.clamp(torch.log2(hours + 1).floor().long() + 1, max=n_buckets - 1)


class BehaviorTransformer(nn.Module):
    def __init__(self, cfg: BSTConfig):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            cfg.d_model, cfg.n_heads, dim_feedforward=4 * cfg.d_model, dropout=cfg.dropout,
            activation="gelu", batch_first=True, norm_first=False,
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)

    def forward(self, x, padding_mask):
        padding_mask = padding_mask.bool()
        return self.encoder(x, src_key_padding_mask=padding_mask)


class BST(nn.Module):
    def __init__(self, cfg: BSTConfig):
        super().__init__()
        self.cfg = cfg
        self.item_emb = nn.Embedding(cfg.n_items, cfg.item_dim, padding_idx=0)
        self.cate_emb = nn.Embedding(cfg.n_cates, cfg.cate_dim, padding_idx=0)
        self.time_emb = nn.Embedding(cfg.n_time_buckets, cfg.d_model, padding_idx=0)
        self.other_emb = nn.ModuleDict({name: nn.Embedding(size, 8) for name, size in cfg.other_features.items()})
        self.transformer = BehaviorTransformer(cfg)
        dims = [cfg.d_model * 2 + 8 * len(cfg.other_features)] + list(cfg.mlp)
        layers = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.LeakyReLU(), nn.Dropout(cfg.dropout)]
        self.mlp = nn.Sequential(*layers, nn.Linear(dims[-1], 1))

    def embed_sequence(self, batch):
        items = torch.cat([batch["hist_item"], batch["target_item"][:, None]], dim=1)
        cates = torch.cat([batch["hist_cate"], batch["target_cate"][:, None]], dim=1)
        buckets = bucketize_seconds(batch["hist_delta"], self.cfg.n_time_buckets) * batch["attention_mask"]
        buckets = torch.cat([buckets, torch.zeros_like(buckets[:, :1])], dim=1)
        x = torch.cat([self.item_emb(items), self.cate_emb(cates)], dim=-1)
        return x * math.sqrt(self.cfg.d_model) + self.time_emb(buckets)

    def forward(self, **batch):
        x = self.embed_sequence(batch)
        seq_mask = torch.cat([batch["attention_mask"], batch["attention_mask"].new_ones(x.size(0), 1)], dim=1)
        padding_mask = seq_mask == 0
        h = self.transformer(x, padding_mask)

        weights = seq_mask[..., :-1].unsqueeze(-1).to(h.dtype)
        behaviour = (h[:, :-1] * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        target = h[:, -1]
        others = [self.other_emb[name](batch[name]) for name in self.cfg.other_features]
        logit = self.mlp(torch.cat([behaviour, target] + others, dim=-1)).squeeze(-1)
        out = {"logit": logit, "prob": torch.sigmoid(logit)}
        if "label" in batch:
            out["loss"] = F.binary_cross_entropy_with_logits(logit, batch["label"])
        return out


def feature_pipeline(rows, cfg: BSTConfig):
    width = min(cfg.max_behaviors, max(len(r["clicks"]) for r in rows))
    batch = {k: [] for k in ("hist_item", "hist_cate", "hist_delta", "attention_mask")}
    for r in rows:
        clicks = r["clicks"][-width:]
        pad = width - len(clicks)
        batch["hist_item"].append([c[0] for c in clicks] + [0] * pad)
        batch["hist_cate"].append([c[1] for c in clicks] + [0] * pad)
        batch["hist_delta"].append([r["now"] - c[2] for c in clicks] + [0] * pad)
        batch["attention_mask"].append([1] * len(clicks) + [0] * pad)
    out = {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
    for key in ("target_item", "target_cate", "user", "age", "city"):
        out[key] = torch.tensor([r[key] for r in rows], dtype=torch.long)
    if "label" in rows[0]:
        out["label"] = torch.tensor([r["label"] for r in rows], dtype=torch.float)
    return out


def synthetic_rows(cfg: BSTConfig, n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        k = int(torch.randint(1, cfg.max_behaviors + 4, (1,), generator=g))
        now = 10_000_000
        clicks = []
        for _ in range(k):
            item = int(torch.randint(1, cfg.n_items, (1,), generator=g))
            clicks.append((item, item % (cfg.n_cates - 1) + 1, now - int(torch.randint(60, 900_000, (1,), generator=g))))
        target = int(torch.randint(1, cfg.n_items, (1,), generator=g))
        rows.append({
            "clicks": clicks, "now": now, "target_item": target, "target_cate": target % (cfg.n_cates - 1) + 1,
            "user": int(torch.randint(0, 80, (1,), generator=g)), "age": int(torch.randint(0, 8, (1,), generator=g)),
            "city": int(torch.randint(0, 20, (1,), generator=g)),
            "label": float(any(c[1] == target % (cfg.n_cates - 1) + 1 for c in clicks)),
        })
    return rows


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = BSTConfig()
    rows = synthetic_rows(cfg)
    model = BST(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(25):
        model.train()
        batch = feature_pipeline(rows[(step * 16) % 96:(step * 16) % 96 + 16], cfg)
        out = model(**batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    print("loss", out["loss"].item())

    model.eval()
    with torch.no_grad():
        short = min(rows, key=lambda r: len(r["clicks"]))
        long = max(rows, key=lambda r: len(r["clicks"]))
        alone = model(**feature_pipeline([short], cfg))["prob"]
        together = model(**feature_pipeline([short, long], cfg))["prob"][:1]
        print("alone", alone.tolist(), "batched vs alone:", (alone - together).abs().max().item())
