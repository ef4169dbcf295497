"""Stanford Ribonanza RNA Folding: per-nucleotide 2A3 / DMS reactivity with a transformer encoder.

Source: seed self_attention_mask_guide.txt §3, §7 Q3; conventions.md §1 (TensorFlow and Keras rows), §2.3.
"""
import os
import gc
import math
import time
import random

import numpy as np

try:
    import pandas as pd
except ImportError:
    pd = None

DEBUG = not os.path.exists("/kaggle/input/stanford-ribonanza-rna-folding")
DATA_DIR = "/kaggle/input/stanford-ribonanza-rna-folding"
OUT_DIR = "./"
SEED = 42
MAX_LEN = 64 if DEBUG else 206
N_SAMPLES = 256
DIM = 96
HEADS = 6
DEPTH = 3
BATCH = 32
EPOCHS = 2
LR = 5e-4
WD = 0.05
SN_FILTER = 1.0


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)


set_seed(SEED)

NUC = {"A": 0, "C": 1, "G": 2, "U": 3}


def make_debug_frame(n):
    seqs, r2a3, rdms = [], [], []
    for _ in range(n):
        L = random.randint(MAX_LEN // 2, MAX_LEN)
        s = "".join(random.choice("ACGU") for _ in range(L))
        paired = np.array([c in "GC" for c in s], dtype=np.float32)
        a = np.clip(0.8 - 0.6 * paired + 0.1 * np.random.randn(L), 0, 1)
        d = np.clip(np.array([0.9 if c in "AC" else 0.1 for c in s]) * (1 - 0.5 * paired) + 0.1 * np.random.randn(L), 0, 1)
        a[np.random.rand(L) < 0.1] = np.nan
        seqs.append(s)
        r2a3.append(a)
        rdms.append(d)
    return {"sequence": seqs, "react_2A3": r2a3, "react_DMS": rdms, "SN_filter": [1.0] * n}


if DEBUG or pd is None:
    data = make_debug_frame(N_SAMPLES)
else:
    df = pd.read_parquet(os.path.join(DATA_DIR, "train_data_QUICK_START.parquet"))
    df = df[df["SN_filter"] >= SN_FILTER]
    cols = [c for c in df.columns if c.startswith("reactivity_0")]
    d2a3, ddms = df[df.experiment_type == "2A3_MaP"], df[df.experiment_type == "DMS_MaP"]
    data = {"sequence": d2a3.sequence.tolist(),
            "react_2A3": [r[cols].values.astype(np.float32) for _, r in d2a3.iterrows()],
            "react_DMS": [r[cols].values.astype(np.float32) for _, r in ddms.iterrows()],
            "SN_filter": d2a3.SN_filter.tolist()}

print("sequences:", len(data["sequence"]), "mean length:", np.mean([len(s) for s in data["sequence"]]))

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class RNADataset(Dataset):
    def __init__(self, data, idx):
        self.seq = [data["sequence"][i] for i in idx]
        self.a = [data["react_2A3"][i] for i in idx]
        self.d = [data["react_DMS"][i] for i in idx]

    def __len__(self):
        return len(self.seq)

    def __getitem__(self, i):
        s = self.seq[i][:MAX_LEN]
        L = len(s)
        ids = torch.full((MAX_LEN,), 4, dtype=torch.long)
        ids[:L] = torch.tensor([NUC[c] for c in s])
        mask = torch.zeros(MAX_LEN, dtype=torch.bool)
        mask[:L] = True
        react = torch.full((MAX_LEN, 2), float("nan"))
        react[:L, 0] = torch.from_numpy(np.asarray(self.a[i][:L], dtype=np.float32))
        react[:L, 1] = torch.from_numpy(np.asarray(self.d[i][:L], dtype=np.float32))
        return {"seq": ids, "mask": mask}, {"react": react, "mask": mask}


def dict_to(d, dev):
    return {k: v.to(dev) for k, v in d.items()}


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim, M=10000):
        super().__init__()
        self.dim = dim
        self.M = M

    def forward(self, x):
        half = self.dim // 2
        emb = math.log(self.M) / half
        emb = torch.exp(torch.arange(half, device=x.device) * (-emb))
        emb = x[..., None] * emb[None, ...]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, bias):
        B, L, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.drop(self.out(h.transpose(1, 2).reshape(B, L, D)))
        return x + self.drop(self.ff(self.norm2(x)))


class RNA_Model(nn.Module):
    def __init__(self, dim=192, depth=12, head_size=32, heads=None, **kwargs):
        super().__init__()
        heads = heads or dim // head_size
        self.emb = nn.Embedding(5, dim)
        self.pos_enc = SinusoidalPosEmb(dim)
        self.blocks = nn.ModuleList([EncoderBlock(dim, heads) for _ in range(depth)])
        self.proj_out = nn.Linear(dim, 2)

    def forward(self, x0):
        mask = x0["mask"]
        Lmax = int(mask.sum(-1).max())
        mask = mask[:, :Lmax]
        x = x0["seq"][:, :Lmax]
        pos = torch.arange(Lmax, device=x.device).unsqueeze(0)
        x = self.emb(x) + self.pos_enc(pos)
        bias = (1.0 - mask.float())[:, None, None, :] * float("-inf")  # expect: MC522 padding
        for blk in self.blocks:
            x = blk(x, bias)
        return self.proj_out(x)


def loss_fn(pred, target):
    p = pred[target["mask"][:, : pred.shape[1]]]
    y = target["react"][:, : pred.shape[1]][target["mask"][:, : pred.shape[1]]].clip(0, 1)
    loss = F.l1_loss(p, y, reduction="none")
    return loss[~torch.isnan(loss)].mean()


class MAE:
    def __init__(self):
        self.x, self.y = [], []

    def accumulate(self, pred, target):
        m = target["mask"][:, : pred.shape[1]]
        self.x.append(pred[m].detach().cpu())
        self.y.append(target["react"][:, : pred.shape[1]][m].cpu())

    def value(self):
        x, y = torch.cat(self.x), torch.cat(self.y)
        loss = F.l1_loss(x, y.clip(0, 1), reduction="none")
        return loss[~torch.isnan(loss)].mean().item()


perm = np.random.permutation(len(data["sequence"]))
n_val = max(1, len(perm) // 8)
ds_train, ds_val = RNADataset(data, perm[n_val:]), RNADataset(data, perm[:n_val])
dl_train = DataLoader(ds_train, batch_size=BATCH, shuffle=True, drop_last=True)
dl_val = DataLoader(ds_val, batch_size=BATCH)

if __name__ == "__main__":
    model = RNA_Model(dim=DIM, depth=DEPTH, heads=HEADS).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=EPOCHS * len(dl_train), pct_start=0.1)
    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        train_losses = []
        for x, y in dl_train:
            x, y = dict_to(x, device), dict_to(y, device)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 3.0)
            opt.step()
            sched.step()
            train_losses.append(loss.item())
        model.eval()
        metric = MAE()
        with torch.no_grad():
            for x, y in dl_val:
                x, y = dict_to(x, device), dict_to(y, device)
                metric.accumulate(model(x), y)
        print(f"epoch {epoch} train_loss {np.nanmean(train_losses):.4f} val_mae {metric.value():.4f} ({time.time() - t0:.0f}s)")
    torch.save(model.state_dict(), os.path.join(OUT_DIR, "rna_model.pth"))
    gc.collect()
