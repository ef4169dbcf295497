"""Nowcasting quarterly real GDP growth from a ragged-edge panel of monthly indicators.

Each indicator is a token holding its last six standardised monthly readings; at a given
vintage the series whose reference-quarter values are not yet published are left out of the
attention across indicators (the ragged edge of the real-time data set). Benchmarked against
an AR(1) on lagged GDP growth, as in the dynamic-factor nowcasting literature.

Source: conventions.md section 2.9 and section 1 (HF 4-D masks row).
"""

import argparse
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

INDICATORS = ["ip", "retail", "pmi", "payrolls", "claims", "housing", "exports", "sentiment"]
RELEASE_LAG = {"ip": 2, "retail": 2, "pmi": 0, "payrolls": 1, "claims": 0, "housing": 2, "exports": 3, "sentiment": 0}
WINDOW = 6


def simulate_panel(n_quarters, rng):
    months = pd.period_range("1990-01", periods=3 * n_quarters, freq="M")
    factor = np.zeros(len(months))
    for t in range(1, len(months)):
        factor[t] = 0.7 * factor[t - 1] + rng.normal()
    panel = pd.DataFrame(index=months)
    for j, name in enumerate(INDICATORS):
        loading = 0.4 + 0.6 * rng.random()
        panel[name] = loading * factor + rng.normal(0, 0.6 + 0.1 * j, len(months))
    quarterly = pd.Series(factor, index=months).groupby(months.asfreq("Q")).mean()
    gdp = 0.8 * quarterly + pd.Series(rng.normal(0, 0.3, len(quarterly)), index=quarterly.index)
    return (panel - panel.mean()) / panel.std(), gdp


def build_vintages(panel, gdp):
    X, avail, y, ar = [], [], [], []
    quarters = gdp.index
    for qi in range(3, len(quarters)):
        end_month = quarters[qi].asfreq("M", how="end")
        for month_in_q in range(3):
            vintage = end_month - (2 - month_in_q)
            tokens = np.zeros((len(INDICATORS), WINDOW), dtype=np.float32)
            released = np.zeros(len(INDICATORS), dtype=bool)
            for j, name in enumerate(INDICATORS):
                last = vintage - RELEASE_LAG[name]
                hist = panel.loc[last - WINDOW + 1 : last, name].to_numpy()
                tokens[j, WINDOW - len(hist) :] = hist
                released[j] = last >= quarters[qi].asfreq("M", how="start")
            X.append(tokens)
            avail.append(released)
            y.append(gdp.iloc[qi])
            ar.append(gdp.iloc[qi - 1])
    return (torch.from_numpy(np.stack(X)), torch.from_numpy(np.stack(avail)),
            torch.tensor(y, dtype=torch.float32), torch.tensor(ar, dtype=torch.float32))


def nowcast(args):
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    panel, gdp = simulate_panel(args.quarters, rng)
    X, released_all, y, ar = build_vintages(panel, gdp)
    n_train = int(0.7 * len(y))

    d = args.d_model
    embed = torch.nn.Linear(WINDOW, d)
    series_id = torch.nn.Parameter(0.1 * torch.randn(len(INDICATORS), d))
    Wq = torch.nn.Parameter(torch.randn(d, d) / math.sqrt(d))
    Wk = torch.nn.Parameter(torch.randn(d, d) / math.sqrt(d))
    Wv = torch.nn.Parameter(torch.randn(d, d) / math.sqrt(d))
    readout = torch.nn.Linear(d, 1)
    params = list(embed.parameters()) + [series_id, Wq, Wk, Wv] + list(readout.parameters())
    opt = torch.optim.Adam(params, lr=args.lr)

    def attend(h, released):
        q, k, v = h @ Wq, h @ Wk, h @ Wv
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(~released[:, None, :], float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    def predict(tokens, released):
        h = embed(tokens) + series_id
        h = F.layer_norm(h + attend(h, released), (d,))
        keep = released.float()[..., None]
        return readout((h * keep).sum(1) / keep.sum(1)).squeeze(-1)

    for epoch in range(args.epochs):
        perm = torch.randperm(n_train)
        for start in range(0, n_train, 64):
            idx = perm[start : start + 64]
            loss = F.mse_loss(predict(X[idx], released_all[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        test = slice(n_train, None)
        rmse = torch.sqrt(F.mse_loss(predict(X[test], released_all[test]), y[test])).item()
        beta = (ar[:n_train] @ y[:n_train]) / (ar[:n_train] @ ar[:n_train])
        rmse_ar = torch.sqrt(F.mse_loss(beta * ar[test], y[test])).item()
    print(f"nowcast RMSE {rmse:.3f}  AR(1) RMSE {rmse_ar:.3f}  relative {rmse / rmse_ar:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quarters", type=int, default=160)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--d-model", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=3)
    nowcast(parser.parse_args())
