"""Labour-force status from 24-hour time-use diaries (ATUS-style activity episodes).

Each respondent's diary is a sequence of episodes from 4 a.m. to 4 a.m. with a six-digit
activity code collapsed to major categories, the start time, the duration and where the
episode happened. Diaries have 8 to 40 episodes; a collate function pads them and returns a
dict in the layout of a tokenizer's output, unpacked into the model. The model predicts
whether the respondent was employed in the reference week, as a check on how much of the
CPS labour-force status the diary alone recovers.

Source: conventions.md section 1 (HF attention_mask row, direction cheat-sheet) and
section 2.4.
"""

import argparse

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

MAJOR_CATEGORIES = ["sleep", "personal_care", "household", "caring", "work", "education",
                    "shopping", "eating", "leisure", "sports", "volunteer", "travel"]
WHERE = ["home", "workplace", "other_home", "store", "outdoors", "vehicle"]


def simulate_diaries(n_resp, rng):
    rows, status = [], []
    for r in range(n_resp):
        employed = rng.random() < 0.6
        weekday = rng.random() < 5 / 7
        minute = 240
        ep = 0
        while minute < 240 + 1440 and ep < 40:
            hour = (minute // 60) % 24
            if hour < 7 or hour >= 23:
                act = "sleep"
            elif employed and weekday and 9 <= hour < 17 and rng.random() < 0.7:
                act = "work"
            else:
                act = rng.choice(MAJOR_CATEGORIES[1:])
            dur = int(min(rng.integers(10, 180), 240 + 1440 - minute))
            where = "workplace" if act == "work" else rng.choice(WHERE)
            rows.append(dict(resp=r, episode=ep, category=act, start=minute, duration=dur, where=where))
            minute += dur
            ep += 1
        status.append(int(employed))
    return pd.DataFrame(rows), np.array(status)


def collate_diaries(frames):
    n = max(len(f) for f in frames)
    cat = np.zeros((len(frames), n), dtype=np.int64)
    where = np.zeros((len(frames), n), dtype=np.int64)
    timing = np.zeros((len(frames), n, 2), dtype=np.float32)
    attention_mask = np.zeros((len(frames), n), dtype=np.int64)
    for i, f in enumerate(frames):
        cat[i, : len(f)] = f["category"].map(MAJOR_CATEGORIES.index)
        where[i, : len(f)] = f["where"].map(WHERE.index)
        timing[i, : len(f), 0] = (f["start"] - 240) / 1440
        timing[i, : len(f), 1] = f["duration"] / 240
        attention_mask[i, : len(f)] = 1
    return {"category": torch.as_tensor(cat), "where": torch.as_tensor(where),
            "timing": torch.as_tensor(timing), "attention_mask": torch.as_tensor(attention_mask)}


class DiaryEncoder(nn.Module):
    def __init__(self, d_model=32, n_heads=4):
        super().__init__()
        self.cat = nn.Embedding(len(MAJOR_CATEGORIES), d_model)
        self.where = nn.Embedding(len(WHERE), d_model)
        self.timing = nn.Linear(2, d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, 1)

    def forward(self, category, where, timing, attention_mask):
        h = self.cat(category) + self.where(where) + self.timing(timing)
        a, _ = self.attn(h, h, h, key_padding_mask=~attention_mask, need_weights=False)  # expect: MC518 unpacked
        h = self.norm(h + a)
        m = attention_mask[..., None].to(h.dtype)
        return self.out((h * m).sum(1) / m.sum(1)).squeeze(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--respondents", type=int, default=800)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    episodes, status = simulate_diaries(args.respondents, rng)
    diaries = [g.sort_values("episode") for _, g in episodes.groupby("resp")]
    y = torch.as_tensor(status, dtype=torch.float32)
    n_train = int(0.8 * len(diaries))
    model = DiaryEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        order = rng.permutation(n_train)
        for start in range(0, n_train, 32):
            idx = order[start : start + 32]
            batch = collate_diaries([diaries[i] for i in idx])
            loss = F.binary_cross_entropy_with_logits(model(**batch), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        batch = collate_diaries(diaries[n_train:])
        acc = ((model(**batch) > 0).float() == y[n_train:]).float().mean().item()
    print(f"employment status accuracy {acc:.3f} (employed share {y[n_train:].mean().item():.2f})")


if __name__ == "__main__":
    main()
