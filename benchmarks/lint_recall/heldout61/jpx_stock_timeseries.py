"""JPX Tokyo Stock Exchange Prediction: causal transformer over each stock's recent daily features, ranked by predicted return.

Source: seed self_attention_mask_guide.txt §3; conventions.md §1 (nn.Transformer row), §3 items 1 and 5 (pytorch/pytorch#41508, #103749).
"""
import os
import gc
import csv
import math
import time
import random
import datetime as dt

import numpy as np

CFG = {
    "seed": 2022,
    "data_dir": "../input/jpx-tokyo-stock-exchange-prediction/train_files",
    "n_stocks": 60,
    "n_days": 220,
    "window": 32,
    "features": ["ret_1", "ret_5", "ret_20", "vol_5", "vol_20", "hl_range", "oc_gap", "turnover"],
    "d_model": 64,
    "nhead": 4,
    "num_layers": 2,
    "dropout": 0.1,
    "batch_size": 64,
    "epochs": 3,
    "lr": 1e-3,
    "top_k": 10,
}

random.seed(CFG["seed"])
np.random.seed(CFG["seed"])


def synthetic_prices(n_stocks, n_days):
    market = np.cumsum(np.random.randn(n_days) * 0.01)
    rows = []
    start = dt.date(2017, 1, 4)
    for s in range(n_stocks):
        beta = np.random.uniform(0.5, 1.5)
        idio = np.cumsum(np.random.randn(n_days) * 0.015 + 0.0002 * np.sin(np.arange(n_days) / (5 + s % 7)))
        close = 1000 * np.exp(beta * market + idio)
        for d in range(n_days):
            o = close[d] * (1 + np.random.randn() * 0.003)
            rows.append({"Date": str(start + dt.timedelta(days=d)), "SecuritiesCode": str(1300 + s),
                         "Open": o, "High": max(o, close[d]) * 1.01, "Low": min(o, close[d]) * 0.99,
                         "Close": close[d], "Volume": float(np.random.randint(1e4, 1e6))})
    return rows


price_path = os.path.join(CFG["data_dir"], "stock_prices.csv")
if os.path.exists(price_path):
    with open(price_path, newline="") as f:
        prices = [r for r in csv.DictReader(f) if r["Close"]]
else:
    prices = synthetic_prices(CFG["n_stocks"], CFG["n_days"])

by_code = {}
for r in prices:
    by_code.setdefault(r["SecuritiesCode"], []).append(r)
for code in by_code:
    by_code[code].sort(key=lambda r: r["Date"])
print("stocks:", len(by_code), "rows:", len(prices))


def make_features(rows):
    c = np.array([float(r["Close"]) for r in rows])
    o = np.array([float(r["Open"]) for r in rows])
    h = np.array([float(r["High"]) for r in rows])
    l = np.array([float(r["Low"]) for r in rows])
    v = np.array([float(r["Volume"]) for r in rows])
    logc = np.log(c)
    ret1 = np.diff(logc, prepend=logc[0])
    f = {
        "ret_1": ret1,
        "ret_5": logc - np.concatenate([np.full(5, logc[0]), logc[:-5]]),
        "ret_20": logc - np.concatenate([np.full(20, logc[0]), logc[:-20]]),
        "vol_5": np.array([ret1[max(0, i - 4): i + 1].std() for i in range(len(c))]),
        "vol_20": np.array([ret1[max(0, i - 19): i + 1].std() for i in range(len(c))]),
        "hl_range": (h - l) / c,
        "oc_gap": (c - o) / o,
        "turnover": np.log1p(v * c) - np.log1p(v * c).mean(),
    }
    target = np.concatenate([c[2:] / c[1:-1] - 1, [np.nan, np.nan]])
    return np.stack([f[k] for k in CFG["features"]], 1).astype(np.float32), target.astype(np.float32)


feats, targets, dates = {}, {}, sorted({r["Date"] for r in prices})
for code, rows in by_code.items():
    feats[code], targets[code] = make_features(rows)

all_f = np.concatenate(list(feats.values()))
MU, SD = all_f.mean(0), all_f.std(0) + 1e-6

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(CFG["seed"])
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class WindowDataset(Dataset):
    def __init__(self, day_lo, day_hi):
        self.index = [(code, d) for code in feats for d in range(max(day_lo, CFG["window"]), day_hi)
                      if not np.isnan(targets[code][d])]

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        code, d = self.index[i]
        x = (feats[code][d - CFG["window"] + 1: d + 1] - MU) / SD
        y = targets[code][d - CFG["window"] + 1: d + 1]
        return torch.from_numpy(x), torch.from_numpy(np.nan_to_num(y)), d


def causal_mask(size):
    return torch.triu(torch.full((size, size), float("-inf")))  # expect: MC503 diagonal


class StockTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        n_feat = len(CFG["features"])
        self.inp = nn.Linear(n_feat, CFG["d_model"])
        self.pos = nn.Parameter(torch.randn(1, CFG["window"], CFG["d_model"]) * 0.02)
        layer = nn.TransformerEncoderLayer(CFG["d_model"], CFG["nhead"], CFG["d_model"] * 4, CFG["dropout"],
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, CFG["num_layers"])
        self.out = nn.Sequential(nn.LayerNorm(CFG["d_model"]), nn.Linear(CFG["d_model"], 1))
        self.register_buffer("mask", causal_mask(CFG["window"]), persistent=False)

    def forward(self, x):
        T = x.size(1)
        h = self.inp(x) + self.pos[:, :T]
        h = self.encoder(h, mask=self.mask[:T, :T])
        return self.out(h).squeeze(-1)


def sharpe_of_daily_spread(preds_by_day, target_by_day, top_k):
    spreads = []
    weights = np.linspace(2, 1, top_k)
    for d in preds_by_day:
        p, t = np.array(preds_by_day[d]), np.array(target_by_day[d])
        if len(p) < 2 * top_k:
            continue
        order = np.argsort(-p)
        long = (t[order[:top_k]] * weights).sum() / weights.mean()
        short = (t[order[::-1][:top_k]] * weights).sum() / weights.mean()
        spreads.append(long - short)
    spreads = np.array(spreads)
    return float(spreads.mean() / (spreads.std() + 1e-9)) if len(spreads) else float("nan")


n_days = len(dates)
split_day = int(n_days * 0.8)
train_ds, valid_ds = WindowDataset(0, split_day), WindowDataset(split_day, n_days)
print("train windows:", len(train_ds), "valid windows:", len(valid_ds))

if __name__ == "__main__":
    model = StockTransformer().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    train_loader = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=True, drop_last=True)
    valid_loader = DataLoader(valid_ds, batch_size=CFG["batch_size"] * 4)
    for epoch in range(CFG["epochs"]):
        t0 = time.time()
        model.train()
        for x, y, _ in train_loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(model(x), y * 100)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        preds_by_day, target_by_day = {}, {}
        with torch.no_grad():
            for x, y, d in valid_loader:
                p = model(x.to(device))[:, -1].cpu().numpy()
                for pi, yi, di in zip(p, y[:, -1].numpy(), d.tolist()):
                    preds_by_day.setdefault(di, []).append(pi)
                    target_by_day.setdefault(di, []).append(yi)
        score = sharpe_of_daily_spread(preds_by_day, target_by_day, CFG["top_k"])
        print(f"epoch {epoch} train_mse {loss.item():.4f} valid sharpe {score:.4f} ({time.time() - t0:.1f}s)")
    torch.save(model.state_dict(), "jpx_transformer.pt")
    gc.collect()
