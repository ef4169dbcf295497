"""Automated house valuation from comparable sales, after ASI (Viana and Barbosa,
"Attention-based spatial interpolation for house price prediction", 2021; darniton/ASI).

A PyTorch port of the ASI layout: ``build_comparables`` finds each subject's nearest past sales,
``HousingDataset`` returns per-subject dicts, and ``ASIModel`` encodes the subject, attends over
its comparables with a distance embedding (the comparables of another submarket are not used),
and regresses the log sale price. Synthetic city with four submarkets.

Source: conventions.md section 2.9 and section 1 (HF 4-D masks row), section 5 item 7.
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

MARKET_PRICE = [5.20, 5.55, 5.05, 5.80]


def simulate_sales(n, rng):
    rows = []
    for _ in range(n):
        lat, lon = rng.uniform(0, 10), rng.uniform(0, 10)
        market = (lat > 5) * 2 + (lon > 5)
        sqft, beds, age = rng.uniform(50, 250), rng.randint(1, 5), rng.uniform(0, 80)
        quality = rng.gauss(0, 1)
        log_price = MARKET_PRICE[market] + 0.9 * math.log(sqft / 100) + 0.03 * beds - 0.002 * age + 0.08 * quality
        rows.append([lat, lon, sqft, beds, age, quality, market, log_price + rng.gauss(0, 0.03)])
    return torch.tensor(rows)


def build_comparables(subjects, sales, k_near=8, k_market=4, max_dist=2.5, exclude_self=False):
    dist = torch.cdist(subjects[:, :2], sales[:, :2])
    if exclude_self:
        dist.fill_diagonal_(float("inf"))
    same = subjects[:, 6:7] == sales[None, :, 6]
    near = dist.masked_fill(dist > max_dist, float("inf")).topk(k_near, largest=False)
    market_near = dist.masked_fill(~same, float("inf")).topk(k_market, largest=False)
    idx = torch.cat([near.indices, market_near.indices], 1)
    comp_keep = torch.cat([near.values.isfinite(), market_near.values.isfinite()], 1)
    same_market = torch.gather(same, 1, idx) & comp_keep
    comp_dist = torch.gather(dist, 1, idx).masked_fill(~comp_keep, 0.0)
    return {"comp_idx": idx, "comp_keep": comp_keep, "same_market": same_market, "comp_dist": comp_dist}


class HousingDataset:
    def __init__(self, subjects, sales, exclude_self=False):
        self.subjects, self.sales = subjects, sales
        self.comps = build_comparables(subjects, sales, exclude_self=exclude_self)

    def batch(self, idx):
        comp_idx = self.comps["comp_idx"][idx]
        return {
            "subject": self.subjects[idx, 2:6],
            "comp_features": self.sales[comp_idx][..., 2:6],
            "comp_log_price": self.sales[comp_idx][..., 7],
            "comp_dist": self.comps["comp_dist"][idx],
            "comp_keep": self.comps["comp_keep"][idx],
            "market_keep": self.comps["same_market"][idx],
            "target": self.subjects[idx, 7],
        }


class FeatureEncoder(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.register_buffer("scale", torch.tensor([100.0, 3.0, 40.0, 1.0]))
        self.net = nn.Sequential(nn.Linear(4, d_model), nn.ReLU(), nn.Linear(d_model, d_model))

    def forward(self, x):
        return self.net(x / self.scale)


class ComparableAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.dist_scale = nn.Parameter(torch.ones(n_heads))

    def forward(self, query, keys, values, dist, pad_keep, market_keep):
        b, k, _ = keys.shape
        q = self.q_proj(query).view(b, self.n_heads, 1, self.d_head)
        kk = self.k_proj(keys).view(b, k, self.n_heads, self.d_head).transpose(1, 2)
        vv = self.v_proj(values).view(b, k, self.n_heads, self.d_head).transpose(1, 2)
        scores = (q @ kk.transpose(-2, -1)).squeeze(2) / math.sqrt(self.d_head)
        scores = scores - F.softplus(self.dist_scale)[None, :, None] * dist[:, None, :]
        scores = scores + market_keep.unsqueeze(1)  # expect: MC509 collator
        scores = scores.masked_fill(~pad_keep.unsqueeze(1), float("-inf"))
        weights = scores.softmax(dim=-1)
        context = (weights.unsqueeze(2) @ vv).reshape(b, -1)
        return context, weights


class ASIModel(nn.Module):
    def __init__(self, d_model=32, n_heads=4):
        super().__init__()
        self.subject_encoder = FeatureEncoder(d_model)
        self.comp_encoder = FeatureEncoder(d_model)
        self.price_embed = nn.Linear(1, d_model)
        self.attention = ComparableAttention(d_model, n_heads)
        self.regressor = nn.Sequential(nn.Linear(2 * d_model, d_model), nn.ReLU(), nn.Linear(d_model, 1))
        self.price_offset = nn.Parameter(torch.tensor(5.4))

    def forward(self, subject, comp_features, comp_log_price, comp_dist, comp_keep, market_keep, target=None):
        s = self.subject_encoder(subject)
        c = self.comp_encoder(comp_features)
        values = c + self.price_embed((comp_log_price - self.price_offset).unsqueeze(-1))
        context, weights = self.attention(s, c, values, comp_dist, pad_keep=comp_keep, market_keep=market_keep)
        pred = self.price_offset + self.regressor(torch.cat([s, context], -1)).squeeze(-1)
        loss = F.mse_loss(pred, target) if target is not None else None
        return {"pred": pred, "loss": loss, "attention": weights}


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    sales = simulate_sales(1500, rng)
    test_subjects = simulate_sales(300, rng)
    train_ds = HousingDataset(sales, sales, exclude_self=True)
    test_ds = HousingDataset(test_subjects, sales)
    model = ASIModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(30):
        model.train()
        perm = torch.randperm(len(sales))
        total = 0.0
        for s in range(0, len(perm), 64):
            out = model(**train_ds.batch(perm[s : s + 64]))
            optimizer.zero_grad()
            out["loss"].backward()
            optimizer.step()
            total += out["loss"].item()
        if epoch % 10 == 9:
            print(f"epoch {epoch + 1} train mse {total / math.ceil(len(perm) / 64):.4f}")
    model.eval()
    with torch.no_grad():
        batch = test_ds.batch(torch.arange(len(test_subjects)))
        out = model(**batch)
    price, pred = batch["target"].exp(), out["pred"].exp()
    mape = ((pred - price).abs() / price).mean().item()
    within10 = (((pred - price).abs() / price) < 0.10).float().mean().item()
    print(f"test MAPE {100 * mape:.2f}%  within 10%: {100 * within10:.1f}%")


if __name__ == "__main__":
    main()
