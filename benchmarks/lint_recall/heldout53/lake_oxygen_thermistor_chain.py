"""Hourly forecast of hypolimnetic dissolved oxygen from a buoy's thermistor chain.

The buoy reports water temperature at eight depths, wind speed and surface oxygen; a causal
transformer predicts the oxygen at 12 m for the next hour. Telemetry arrives in six-hour
bursts, so the operational forecaster keeps a key/value cache of the season so far and feeds
each burst at once.

Source: conventions.md section 1 (SDPA is_causal row) and section 2.7; pytorch/pytorch PR #111007.
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEPTHS_M = [0.5, 1, 2, 4, 6, 8, 10, 12]
N_FEATURES = len(DEPTHS_M) + 2
BURST_HOURS = 6


def simulate_buoy(n_hours, rng):
    t = np.arange(n_hours)
    air = 18 + 6 * np.sin(2 * np.pi * t / 24) + 4 * np.sin(2 * np.pi * t / (24 * 30))
    wind = np.abs(rng.normal(3, 2, n_hours))
    temps = np.stack([air * np.exp(-d / 9) + 6 * (1 - np.exp(-d / 9)) for d in DEPTHS_M], 1)
    temps += rng.normal(0, 0.2, temps.shape)
    strat = temps[:, 0] - temps[:, -1]
    do_bottom = np.zeros(n_hours)
    do_bottom[0] = 9.0
    for h in range(1, n_hours):
        mixing = 0.02 * wind[h] / (1 + strat[h])
        do_bottom[h] = do_bottom[h - 1] - 0.01 + mixing * (9.5 - do_bottom[h - 1])
    do_surface = 9 + 0.5 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.1, n_hours)
    X = np.column_stack([temps, wind, do_surface]).astype(np.float32)
    X = (X - X.mean(0)) / X.std(0)
    return X, do_bottom.astype(np.float32)


class CausalBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x, cache=None):
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, L, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        x = x + self.proj(out.transpose(1, 2).reshape(B, L, D))
        x = x + self.ff(self.ln2(x))
        return x, (k, v)


class OxygenForecaster(nn.Module):
    def __init__(self, d_model=32, n_heads=4, n_layers=2, max_hours=4096):
        super().__init__()
        self.inp = nn.Linear(N_FEATURES, d_model)
        self.hour_of_season = nn.Embedding(max_hours, d_model)
        self.blocks = nn.ModuleList([CausalBlock(d_model, n_heads) for _ in range(n_layers)])
        self.out = nn.Linear(d_model, 1)

    def forward(self, x, start=0, caches=None):
        pos = torch.arange(start, start + x.shape[1])
        h = self.inp(x) + self.hour_of_season(pos)
        new_caches = []
        for i, block in enumerate(self.blocks):
            h, c = block(h, None if caches is None else caches[i])
            new_caches.append(c)
        return self.out(h).squeeze(-1), new_caches


def operational_run(model, X, spinup):
    with torch.no_grad():
        preds, caches = model(X[None, :spinup])
        outputs = [preds]
        for start in range(spinup, X.shape[0], BURST_HOURS):
            burst = X[None, start : start + BURST_HOURS]
            preds, caches = model(burst, start=start, caches=caches)
            outputs.append(preds)
    return torch.cat(outputs, dim=1)[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=int, default=1200)
    parser.add_argument("--window", type=int, default=96)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    X, do_bottom = simulate_buoy(args.hours, rng)
    X, y = torch.from_numpy(X), torch.from_numpy(do_bottom)
    y_next = torch.roll(y, -1)
    n_train = int(0.8 * args.hours)
    model = OxygenForecaster()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(args.steps):
        starts = torch.randint(0, n_train - args.window - 1, (16,))
        xb = torch.stack([X[s : s + args.window] for s in starts])
        yb = torch.stack([y_next[s : s + args.window] for s in starts])
        pred, _ = model(xb, start=0)
        loss = F.mse_loss(pred, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()

    season = X[n_train - 48 : n_train - 48 + args.window]
    target = y_next[n_train - 48 : n_train - 48 + args.window]
    with torch.no_grad():
        full, _ = model(season[None])
    online = operational_run(model, season, spinup=48)
    rmse = torch.sqrt(F.mse_loss(online[48:], target[48:])).item()
    gap = (online - full[0]).abs().max().item()
    print(f"train loss {loss.item():.4f}  online RMSE {rmse:.3f} mg/L  max |online - batch| {gap:.4f}")


if __name__ == "__main__":
    main()
