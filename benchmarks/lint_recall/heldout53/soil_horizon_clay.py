"""Laboratory clay content of soil horizons from field profile descriptions.

Each pit is described horizon by horizon (depths, Munsell value and chroma, field pH, the
surveyor's hand-texture class, coarse fragments); the lab particle-size analysis gives the
clay percentage. Horizons of a profile are related (illuviation moves clay down into the Bt),
so an encoder reads all horizons of a pit together. Pits have two to seven horizons and are
padded by hand in the collate function.

Source: huggingface/transformers#32195 (conventions.md section 3, item 25), conventions.md
section 1 (HF 4.x AttentionMaskConverter row); seed self_attention_mask_guide.txt, section 7 Q5.
"""

import argparse

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

TEXTURE_CLASSES = ["S", "LS", "SL", "L", "SiL", "SCL", "CL", "SiCL", "SC", "C"]
FEATURES = ["top_cm", "bottom_cm", "value", "chroma", "ph", "coarse_pct"]
MAX_HORIZONS = 7


def simulate_survey(n_pits, rng):
    rows = []
    for pit in range(n_pits):
        n_hz = rng.integers(2, MAX_HORIZONS + 1)
        bounds = np.sort(rng.choice(np.arange(5, 180, 5), n_hz, replace=False))
        top = 0
        bt_depth = rng.uniform(20, 80)
        for h, bottom in enumerate(bounds):
            mid = 0.5 * (top + bottom)
            clay = 12 + 25 * np.exp(-((mid - bt_depth) / 25) ** 2) + rng.normal(0, 2)
            texture = int(np.clip(clay / 5 + rng.normal(0, 0.7), 0, len(TEXTURE_CLASSES) - 1))
            rows.append(dict(pit=pit, horizon=h, top_cm=top, bottom_cm=bottom,
                             value=3 + mid / 60 + rng.normal(0, 0.3), chroma=2 + clay / 15 + rng.normal(0, 0.6),
                             ph=5.5 + mid / 100 + rng.normal(0, 0.2), coarse_pct=rng.uniform(0, 30),
                             texture=TEXTURE_CLASSES[texture], clay=clay))
            top = bottom
    return pd.DataFrame(rows)


def collate_profiles(profiles):
    n = max(len(p) for p in profiles)
    X = np.zeros((len(profiles), n, len(FEATURES)), dtype=np.float32)
    tex = np.zeros((len(profiles), n), dtype=np.int64)
    y = np.zeros((len(profiles), n), dtype=np.float32)
    keep = np.zeros((len(profiles), n), dtype=bool)
    for i, p in enumerate(profiles):
        X[i, : len(p)] = p[FEATURES].to_numpy()
        tex[i, : len(p)] = p["texture"].map(TEXTURE_CLASSES.index).to_numpy()
        y[i, : len(p)] = p["clay"].to_numpy()
        keep[i, : len(p)] = True
    keep = torch.from_numpy(keep)
    pad = 1 - keep  # expect: MC512 collate
    return torch.from_numpy(X), torch.from_numpy(tex), torch.from_numpy(y), keep, pad


class ProfileEncoder(nn.Module):
    def __init__(self, mean, std, d_model=32):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))
        self.num = nn.Linear(len(FEATURES), d_model)
        self.texture = nn.Embedding(len(TEXTURE_CLASSES), d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 1)

    def forward(self, X, tex, pad):
        h = self.num((X - self.mean) / self.std) + self.texture(tex)
        h = self.encoder(h, src_key_padding_mask=pad.bool())
        return self.head(h).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pits", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    survey = simulate_survey(args.pits, rng)
    profiles = [g.sort_values("horizon") for _, g in survey.groupby("pit")]
    n_train = int(0.8 * len(profiles))
    train, test = profiles[:n_train], profiles[n_train:]
    stats = survey[FEATURES]
    model = ProfileEncoder(stats.mean().to_numpy(), stats.std().to_numpy())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    for epoch in range(args.epochs):
        order = rng.permutation(n_train)
        for start in range(0, n_train, 16):
            X, tex, y, keep, pad = collate_profiles([train[i] for i in order[start : start + 16]])
            err = (model(X, tex, pad) - y)[keep]
            loss = (err ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    model.eval()
    with torch.no_grad():
        X, tex, y, keep, pad = collate_profiles(test)
        rmse = torch.sqrt(((model(X, tex, pad) - y)[keep] ** 2).mean()).item()
    print(f"clay RMSE on held-out pits {rmse:.2f} %")


if __name__ == "__main__":
    main()
