"""Spring green-up date of deciduous canopies from PhenoCam green chromatic coordinate.

For each site-year the daily 90th-percentile GCC of the canopy region of interest is read
for day of year 60-180; days whose images are snow-covered, foggy or missing are flagged by
the image-quality screen. The model attends over the usable days and regresses the day of
year at which GCC crosses 50 % of its seasonal amplitude (the transition date of the
PhenoCam data products). Parameters live in a dict and the layers are applied in a loop.

Source: conventions.md section 1 (HF attention_mask row, direction cheat-sheet); seed
self_attention_mask_guide.txt, section 7 Q1; seed masked_fill_inplace.txt (作用).
"""

import argparse
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

DOY = np.arange(60, 181)
N_LAYERS = 2
D_MODEL = 32
N_HEADS = 4


def simulate_site_years(n, rng):
    frames, greenup = [], []
    for i in range(n):
        g50 = rng.normal(125, 10)
        rate = rng.uniform(0.12, 0.3)
        gcc = 0.33 + 0.09 / (1 + np.exp(-rate * (DOY - g50))) + rng.normal(0, 0.004, DOY.size)
        snow_end = rng.integers(60, 110) if rng.random() < 0.6 else 60
        snow = (DOY < snow_end) & (rng.random(DOY.size) < 0.5)
        fog = rng.random(DOY.size) < rng.choice([0.0, 0.04, 0.08])
        frames.append(pd.DataFrame({"doy": DOY, "gcc_90": gcc, "snow_flag": snow, "fog_flag": fog}))
        greenup.append(g50)
    return frames, np.array(greenup, dtype=np.float32)


def prepare_batch(frames):
    gcc = np.stack([f["gcc_90"].to_numpy() for f in frames]).astype(np.float32)
    usable = np.stack([~(f["snow_flag"] | f["fog_flag"]).to_numpy() for f in frames])
    gcc = np.where(usable, (gcc - 0.37) / 0.05, 0.0).astype(np.float32)
    return {"gcc": torch.as_tensor(gcc), "attention_mask": torch.as_tensor(usable.astype(np.int64))}


def init_params(seed):
    g = torch.Generator().manual_seed(seed)
    p = {"inp": torch.randn(2, D_MODEL, generator=g) * 0.5,
         "doy_freq": torch.randn(8, generator=g) * 0.05,
         "out": torch.randn(D_MODEL, 1, generator=g) / math.sqrt(D_MODEL)}
    for l in range(N_LAYERS):
        for name in ("wq", "wk", "wv", "wo", "ff1", "ff2"):
            p[f"{name}{l}"] = torch.randn(D_MODEL, D_MODEL, generator=g) / math.sqrt(D_MODEL)
    return {k: v.requires_grad_() for k, v in p.items()}


def forward(p, gcc, attention_mask):
    B, T = gcc.shape
    doy = torch.as_tensor(DOY, dtype=torch.float32)
    angles = doy[:, None] * p["doy_freq"][None, :]
    pos = torch.cat([torch.sin(angles), torch.cos(angles)], -1)
    pos = F.pad(pos, (0, D_MODEL - pos.shape[1]))
    x = torch.stack([gcc, attention_mask.float()], -1) @ p["inp"] + pos
    dh = D_MODEL // N_HEADS
    for l in range(N_LAYERS):
        q = (x @ p[f"wq{l}"]).view(B, T, N_HEADS, dh).transpose(1, 2)
        k = (x @ p[f"wk{l}"]).view(B, T, N_HEADS, dh).transpose(1, 2)
        v = (x @ p[f"wv{l}"]).view(B, T, N_HEADS, dh).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        a = torch.softmax(scores, -1) @ v
        x = F.layer_norm(x + a.transpose(1, 2).reshape(B, T, D_MODEL) @ p[f"wo{l}"], (D_MODEL,))
        x = F.layer_norm(x + torch.relu(x @ p[f"ff1{l}"]) @ p[f"ff2{l}"], (D_MODEL,))
    w = attention_mask[..., None].float()
    return 120.0 + 20.0 * ((x * w).sum(1) / w.sum(1) @ p["out"]).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--site-years", type=int, default=360)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    frames, g50 = simulate_site_years(args.site_years, rng)
    y = torch.as_tensor(g50)
    n_train = int(0.8 * len(frames))
    params = init_params(args.seed)
    opt = torch.optim.Adam(params.values(), lr=2e-3)
    for epoch in range(args.epochs):
        order = rng.permutation(n_train)
        for start in range(0, n_train, 24):
            idx = order[start : start + 24]
            batch = prepare_batch([frames[i] for i in idx])
            loss = F.l1_loss(forward(params, batch["gcc"], batch["attention_mask"]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        batch = prepare_batch(frames[n_train:])
        mae = F.l1_loss(forward(params, batch["gcc"], batch["attention_mask"]), y[n_train:]).item()
    print(f"green-up date MAE {mae:.2f} days (train L1 {loss.item():.2f})")


if __name__ == "__main__":
    main()
