"""Next-day forecast of GNSS station positions (daily east / north / up solutions).

Daily coordinate time series of continuous GNSS stations (as in the NGL .tenv3 files) are
detrended station by station, gaps of up to five days are interpolated linearly, and the
residual east, north and up displacements (mm) plus the annual and semi-annual phase are fed
to a causal transformer built on nn.MultiheadAttention that predicts the next day's residual.
The look-ahead mask is built in numpy once per window length.

Source: pytorch/pytorch#29546 and rasbt/LLMs-from-scratch#1061 (conventions.md section 3,
items 9 and 14); conventions.md section 1, direction cheat-sheet.
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

WINDOW = 60
COMPONENTS = ["east", "north", "up"]


def simulate_tenv3(n_stations, n_days, rng):
    t = np.arange(n_days) / 365.25
    series = []
    for s in range(n_stations):
        vel = rng.normal(0, 15, 3)
        annual = rng.normal(0, [1.0, 1.0, 4.0])
        xyz = vel[None] * t[:, None] + annual[None] * np.sin(2 * np.pi * t + rng.uniform(0, 6.3))[:, None]
        noise = np.zeros((n_days, 3))
        for d in range(1, n_days):
            noise[d] = 0.8 * noise[d - 1] + rng.normal(0, [0.8, 0.8, 2.5])
        xyz += noise
        gaps = rng.random(n_days) < 0.03
        xyz[gaps] = np.nan
        series.append(xyz)
    return t, series


def detrend_and_fill(t, xyz):
    out = xyz.copy()
    for c in range(3):
        ok = ~np.isnan(out[:, c])
        A = np.column_stack([np.ones(ok.sum()), t[ok]])
        coef, *_ = np.linalg.lstsq(A, out[ok, c], rcond=None)
        out[:, c] -= coef[0] + coef[1] * t
        out[~ok, c] = np.interp(np.flatnonzero(~ok), np.flatnonzero(ok), out[ok, c])
    return out


def lookahead_mask(n):
    return torch.from_numpy(np.triu(np.ones((n, n), dtype=bool), k=1))


class DisplacementModel(nn.Module):
    def __init__(self, d_model=32, n_heads=4, n_layers=2):
        super().__init__()
        self.inp = nn.Linear(len(COMPONENTS) + 4, d_model)
        self.layers = nn.ModuleList([nn.MultiheadAttention(d_model, n_heads, batch_first=True) for _ in range(n_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(n_layers)])
        self.ffs = nn.ModuleList([nn.Sequential(nn.Linear(d_model, 64), nn.GELU(), nn.Linear(64, d_model)) for _ in range(n_layers)])
        self.out = nn.Linear(d_model, len(COMPONENTS))

    def forward(self, x, phase):
        mask = lookahead_mask(x.shape[1])
        h = self.inp(torch.cat([x, phase], -1))
        for att, norm, ff in zip(self.layers, self.norms, self.ffs):
            a, _ = att(h, h, h, attn_mask=mask, need_weights=False)
            h = norm(h + a)
            h = h + ff(h)
        return self.out(h)


def make_windows(t, stations):
    phase = np.column_stack([np.sin(2 * np.pi * t), np.cos(2 * np.pi * t),
                             np.sin(4 * np.pi * t), np.cos(4 * np.pi * t)]).astype(np.float32)
    X, P, Y = [], [], []
    for res in stations:
        res = (res / 5.0).astype(np.float32)
        for start in range(0, len(t) - WINDOW - 1, 20):
            X.append(res[start : start + WINDOW])
            P.append(phase[start : start + WINDOW])
            Y.append(res[start + 1 : start + WINDOW + 1])
    return torch.from_numpy(np.stack(X)), torch.from_numpy(np.stack(P)), torch.from_numpy(np.stack(Y))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stations", type=int, default=24)
    parser.add_argument("--days", type=int, default=1460)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    t, raw = simulate_tenv3(args.stations, args.days, rng)
    stations = [detrend_and_fill(t, xyz) for xyz in raw]
    n_train = int(0.75 * args.stations)
    Xtr, Ptr, Ytr = make_windows(t, stations[:n_train])
    Xte, Pte, Yte = make_windows(t, stations[n_train:])
    model = DisplacementModel()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        perm = torch.randperm(len(Xtr))
        for start in range(0, len(Xtr), 32):
            idx = perm[start : start + 32]
            loss = F.mse_loss(model(Xtr[idx], Ptr[idx]), Ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    model.eval()
    with torch.no_grad():
        pred = model(Xte, Pte)
        rmse = torch.sqrt(((pred[:, -1] - Yte[:, -1]) ** 2).mean(0)) * 5.0
        persist = torch.sqrt(((Xte[:, -1] - Yte[:, -1]) ** 2).mean(0)) * 5.0
    print(f"train loss {loss.item():.3f}")
    print("next-day RMSE (mm) E/N/U", [round(v, 2) for v in rmse.tolist()],
          "persistence", [round(v, 2) for v in persist.tolist()])


if __name__ == "__main__":
    main()
