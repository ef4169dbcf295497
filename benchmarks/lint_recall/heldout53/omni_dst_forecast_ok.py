"""One-hour-ahead Dst forecast from OMNI hourly solar-wind data with data gaps.

The inputs are the OMNI2 hourly columns (IMF Bz GSM, flow speed, proton density, flow
pressure) and the current Dst; OMNI marks missing hours with fill values (9999.99, 999.9, ...),
which are read as gaps. A 24-hour window of hours is encoded by attention across hours, the
gap hours being masked, and the last hour's state gives the next hour's Dst (nT), compared
with persistence. The simulated storms follow the Burton et al. (1975) injection model.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3, item 20) and
conventions.md section 5, item 5.
"""

import argparse
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

OMNI_FILL = {"bz_gsm": 999.9, "speed": 9999.0, "density": 999.9, "pressure": 99.99}
COLUMNS = ["bz_gsm", "speed", "density", "pressure", "dst"]


@dataclass
class ForecastConfig:
    window: int = 24
    d_model: int = 32
    n_heads: int = 4
    gap_fill: float = float("-inf")
    lr: float = 2e-3
    epochs: int = 8


def simulate_omni(n_hours, rng):
    bz = np.zeros(n_hours)
    for t in range(1, n_hours):
        bz[t] = 0.95 * bz[t - 1] + rng.normal(0, 1.2)
    speed = 420 + 80 * np.sin(np.arange(n_hours) / 300) + rng.normal(0, 20, n_hours)
    density = np.abs(5 + rng.normal(0, 2, n_hours))
    pressure = 1.67e-6 * density * speed ** 2
    dst = np.zeros(n_hours)
    for t in range(1, n_hours):
        injection = -1e-3 * speed[t] * max(-bz[t], 0) * 4
        dst[t] = dst[t - 1] + injection - dst[t - 1] / 8
    df = pd.DataFrame(dict(bz_gsm=bz, speed=speed, density=density, pressure=pressure, dst=dst))
    gaps = rng.random(n_hours) < 0.15
    for col, fill in OMNI_FILL.items():
        df.loc[gaps, col] = fill
    return df


def windows_from_frame(df, window):
    clean = df.copy()
    for col, fill in OMNI_FILL.items():
        clean.loc[clean[col] >= fill, col] = np.nan
    gap = clean[COLUMNS[:4]].isna().any(axis=1).to_numpy()
    values = ((clean - clean.mean()) / clean.std()).fillna(0.0).to_numpy(np.float32)
    X, G, y, persist = [], [], [], []
    for t in range(window, len(df) - 1):
        if gap[t - window : t].mean() > 0.5:
            continue
        X.append(values[t - window : t])
        G.append(gap[t - window : t])
        y.append(df["dst"].iloc[t])
        persist.append(df["dst"].iloc[t - 1])
    return (torch.as_tensor(np.stack(X)), torch.as_tensor(np.stack(G)),
            torch.as_tensor(y, dtype=torch.float32), torch.as_tensor(persist, dtype=torch.float32))


class DstNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(len(COLUMNS), cfg.d_model)
        self.hour = nn.Parameter(0.02 * torch.randn(cfg.window, cfg.d_model))
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, 1)

    def forward(self, x, gap):
        B, T, _ = x.shape
        H = self.cfg.n_heads
        h = self.inp(x) + self.hour
        q, k, v = (t.view(B, T, H, -1).transpose(1, 2) for t in self.qkv(h).chunk(3, -1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(gap[:, None, None, :], self.cfg.gap_fill)
        att = torch.softmax(scores, dim=-1)
        h = self.norm(h + self.proj((att @ v).transpose(1, 2).reshape(B, T, -1)))
        return self.head(h[:, -1]).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    cfg = ForecastConfig()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    X, G, y, persist = windows_from_frame(simulate_omni(args.hours, rng), cfg.window)
    n_train = int(0.75 * len(y))
    scale = y[:n_train].std()
    model = DstNet(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        perm = torch.randperm(n_train)
        for start in range(0, n_train, 64):
            idx = perm[start : start + 64]
            loss = F.mse_loss(model(X[idx], G[idx]), y[idx] / scale)
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        pred = model(X[n_train:], G[n_train:]) * scale
    rmse = torch.sqrt(F.mse_loss(pred, y[n_train:])).item()
    rmse_p = torch.sqrt(F.mse_loss(persist[n_train:], y[n_train:])).item()
    print(f"Dst RMSE {rmse:.2f} nT  persistence {rmse_p:.2f} nT")


if __name__ == "__main__":
    main()
