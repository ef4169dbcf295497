"""Which restaurants will fail their next routine inspection? (city food-safety programme)

The inspection history of each establishment (date, inspection type, score, number of
critical and non-critical violations) is read from the open-data export; the model attends
over the last twelve inspections with a learned query and predicts whether the next routine
inspection records a critical violation, so that inspectors can be sent to the riskiest
kitchens first. Establishments with fewer inspections are padded.

Source: seed self_attention_mask_guide.txt, section 7 Q3 and section 3 (常见误区);
pytorch/pytorch#103963 (conventions.md section 3, item 6).
"""

import argparse

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_HISTORY = 12
TYPES = ["routine", "follow_up", "complaint", "pre_opening"]
FEATURES = ["score", "critical", "noncritical", "days_since_prev"]


def simulate_inspections(n_places, rng):
    rows = []
    for pid in range(n_places):
        risk = rng.beta(2, 5)
        day = 0
        for k in range(rng.integers(1, MAX_HISTORY + 4)):
            day += int(rng.integers(90, 400))
            critical = rng.poisson(3 * risk)
            itype = "routine" if k == 0 or rng.random() < 0.7 else rng.choice(TYPES[1:])
            rows.append(dict(place_id=pid, date=day, type=itype, critical=critical,
                             noncritical=rng.poisson(2 + 4 * risk), score=100 - 8 * critical - rng.integers(0, 6)))
            risk = float(np.clip(risk + rng.normal(0, 0.05), 0, 1))
        rows.append(dict(place_id=pid, date=day + 365, type="next", critical=rng.poisson(3 * risk),
                         noncritical=0, score=0))
    return pd.DataFrame(rows)


def build_histories(df):
    df = df.sort_values(["place_id", "date"])
    df["days_since_prev"] = df.groupby("place_id")["date"].diff().fillna(365) / 365
    X, T, n_hist, y = [], [], [], []
    for _, g in df.groupby("place_id"):
        hist, nxt = g[g["type"] != "next"].tail(MAX_HISTORY), g[g["type"] == "next"].iloc[0]
        feats = np.zeros((MAX_HISTORY, len(FEATURES)), dtype=np.float32)
        types = np.zeros(MAX_HISTORY, dtype=np.int64)
        feats[: len(hist)] = hist[FEATURES].to_numpy() / np.array([100, 5, 10, 1])
        types[: len(hist)] = hist["type"].map(TYPES.index).to_numpy()
        X.append(feats)
        T.append(types)
        n_hist.append(len(hist))
        y.append(float(nxt["critical"] > 0))
    return (torch.as_tensor(np.stack(X)), torch.as_tensor(np.stack(T)),
            np.array(n_hist), torch.as_tensor(y))


class InspectionRisk(nn.Module):
    def __init__(self, d_model=32):
        super().__init__()
        self.feat = nn.Linear(len(FEATURES), d_model)
        self.kind = nn.Embedding(len(TYPES), d_model)
        self.recency = nn.Embedding(MAX_HISTORY, d_model)
        self.query = nn.Parameter(torch.randn(d_model) / d_model ** 0.5)
        self.key = nn.Linear(d_model, d_model)
        self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 1))

    def forward(self, X, types, n_hist):
        keep = torch.as_tensor(np.arange(MAX_HISTORY)[None, :] < n_hist[:, None], dtype=torch.float32)
        h = torch.relu(self.feat(X) + self.kind(types) + self.recency.weight[None])
        logits = self.key(h) @ self.query / h.shape[-1] ** 0.5
        weights = torch.softmax(logits.masked_fill(keep == 0, float("-inf")), dim=1)
        return self.head((weights[..., None] * h).sum(1)).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--places", type=int, default=1500)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    X, T, n_hist, y = build_histories(simulate_inspections(args.places, rng))
    n_train = int(0.8 * len(y))
    model = InspectionRisk()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        perm = rng.permutation(n_train)
        for start in range(0, n_train, 64):
            idx = perm[start : start + 64]
            loss = F.binary_cross_entropy_with_logits(model(X[idx], T[idx], n_hist[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        p = torch.sigmoid(model(X[n_train:], T[n_train:], n_hist[n_train:]))
    yt = y[n_train:]
    top = p.argsort(descending=True)[: len(p) // 5]
    print(f"accuracy {((p > 0.5).float() == yt).float().mean().item():.3f}  "
          f"failure rate in top 20% {yt[top].mean().item():.3f} (base {yt.mean().item():.3f})")


if __name__ == "__main__":
    main()
