"""Clinical mastitis alerts from automatic milking system (AMS) visit records.

The robot logs every milking: yield, electrical conductivity and blood signal per quarter,
milking interval and milk temperature. For each cow the last two weeks of visits (up to 32;
cows come two to four times a day, fewer when lame) are attended over to predict a clinical
case in the next 48 h. Herd records are exported per farm and padded per cow.

Source: conventions.md section 2.6 and section 5, item 6.
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

MAX_VISITS = 32
BATCH_SIZE = 32
VISIT_FEATURES = ["yield_kg", "ec_lf", "ec_rf", "ec_lh", "ec_rh", "blood", "interval_h", "temp_c"]


def simulate_herd(n_cows, rng):
    visits, labels = [], []
    for cow in range(n_cows):
        n = rng.integers(12, MAX_VISITS + 1)
        case = rng.random() < 0.3
        onset = rng.integers(n // 2, n) if case else n
        quarter = rng.integers(4)
        rec = np.zeros((n, len(VISIT_FEATURES)), dtype=np.float32)
        rec[:, 0] = rng.normal(12, 2, n)
        rec[:, 1:5] = rng.normal(4.8, 0.2, (n, 4))
        rec[onset:, 1 + quarter] += np.linspace(0.05, 0.4, n - onset)
        rec[onset:, 0] -= 0.5
        rec[:, 5] = rng.random(n) < (0.12 if case else 0.05)
        rec[:, 6] = rng.normal(8, 2, n)
        rec[:, 7] = rng.normal(38.5, 0.3, n) + (0.1 if case else 0.0)
        visits.append(rec)
        labels.append(float(case))
    return visits, np.array(labels, dtype=np.float32)


def pad_visits(visits, mean, std):
    X = np.zeros((len(visits), MAX_VISITS, len(VISIT_FEATURES)), dtype=np.float32)
    lengths = np.array([len(v) for v in visits])
    for i, v in enumerate(visits):
        X[i, : len(v)] = (v - mean) / std
    keep = torch.from_numpy(np.arange(MAX_VISITS)[None, :] < lengths[:, None])
    return torch.from_numpy(X), keep


class VisitAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, h, keep):
        B, T, D = h.shape
        q, k, v = (t.reshape(B, T, self.n_heads, -1).transpose(1, 2) for t in self.qkv(h).chunk(3, -1))
        out = sdpa(q, k, v, keep)  # expect: MC515 positional
        return self.o(out.transpose(1, 2).reshape(B, T, D))


class MastitisNet(nn.Module):
    def __init__(self, d_model=32, n_heads=4):
        super().__init__()
        self.inp = nn.Linear(len(VISIT_FEATURES), d_model)
        self.pos = nn.Embedding(MAX_VISITS, d_model)
        self.att = VisitAttention(d_model, n_heads)
        self.norm = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 64), nn.ReLU(), nn.Linear(64, d_model))
        self.cls = nn.Linear(d_model, 1)

    def forward(self, X, keep):
        h = self.inp(X) + self.pos.weight[None]
        h = self.norm(h + self.att(h, keep))
        h = h + self.ff(h)
        w = keep.float()[..., None]
        return self.cls((h * w).sum(1) / w.sum(1)).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cows", type=int, default=832)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    visits, labels = simulate_herd(args.cows, rng)
    n_train = 640
    allv = np.concatenate(visits[:n_train])
    mean, std = allv.mean(0), allv.std(0) + 1e-6
    X, keep = pad_visits(visits, mean, std)
    y = torch.from_numpy(labels)

    model = MastitisNet()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train)
        for start in range(0, n_train, BATCH_SIZE):
            idx = perm[start : start + BATCH_SIZE]
            loss = nn.functional.binary_cross_entropy_with_logits(model(X[idx], keep[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    model.eval()
    probs = []
    with torch.no_grad():
        for start in range(n_train, len(y), BATCH_SIZE):
            probs.append(torch.sigmoid(model(X[start : start + BATCH_SIZE], keep[start : start + BATCH_SIZE])))
    probs = torch.cat(probs)
    alerts = probs > 0.5
    truth = y[n_train:].bool()
    sens = (alerts & truth).sum().item() / max(truth.sum().item(), 1)
    spec = (~alerts & ~truth).sum().item() / max((~truth).sum().item(), 1)
    print(f"sensitivity {sens:.3f}  specificity {spec:.3f}")


if __name__ == "__main__":
    main()
