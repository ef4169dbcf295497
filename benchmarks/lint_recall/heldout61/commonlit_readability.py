"""CommonLit Readability Prize: excerpt readability regression, transformer encoder with an attention head.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3 item 18); huggingface/lerobot PR #710 (§3 item 19); §2.3.
"""
import os
import gc
import re
import csv
import math
import time
import random

import numpy as np


class Config:
    seed = 42
    train_file = "../input/commonlitreadabilityprize/train.csv"
    test_file = "../input/commonlitreadabilityprize/test.csv"
    max_len = 160
    vocab_size = 5000
    hidden = 128
    heads = 4
    layers = 2
    dropout = 0.1
    batch_size = 16
    epochs = 2
    lr = 2e-4
    head_lr = 1e-3
    weight_decay = 0.01
    evaluate_every = 10
    n_folds = 5
    folds_to_run = [0]
    fp16 = True
    n_synthetic = 400


cfg = Config()


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)


set_seed(cfg.seed)

EASY = "the cat sat on a mat and it was fun to play in the sun with my dog".split()
HARD = ("notwithstanding epistemological considerations the juxtaposition of heterogeneous "
        "phenomena necessitates comprehensive reevaluation of methodological presuppositions").split()


def synthetic_excerpts(n):
    out = []
    for i in range(n):
        hardness = random.random()
        words = [random.choice(HARD if random.random() < hardness else EASY) for _ in range(random.randint(40, 140))]
        target = -3.5 * hardness + 0.5 + random.gauss(0, 0.2)
        out.append({"id": f"c{i:05d}", "excerpt": " ".join(words), "target": f"{target:.4f}",
                    "standard_error": "0.48"})
    return out


if os.path.exists(cfg.train_file):
    with open(cfg.train_file, newline="", encoding="utf-8") as f:
        train_data = list(csv.DictReader(f))
else:
    train_data = synthetic_excerpts(cfg.n_synthetic)

targets = np.array([float(r["target"]) for r in train_data], dtype=np.float32)
num_bins = int(np.floor(1 + np.log2(len(train_data))))
bins = np.digitize(targets, np.histogram_bin_edges(targets, bins=num_bins)[1:-1])
kfold = np.zeros(len(train_data), dtype=int)
for b in np.unique(bins):
    idx = np.where(bins == b)[0]
    np.random.shuffle(idx)
    kfold[idx] = np.arange(len(idx)) % cfg.n_folds
print(f"{len(train_data)} excerpts, target {targets.mean():.3f} ± {targets.std():.3f}, {num_bins} bins")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(cfg.seed)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
USE_AMP = cfg.fp16 and DEVICE.type == "cuda"


def simple_tokenize(text, max_len, vocab_size):
    words = re.findall(r"[a-z']+", text.lower())[: max_len - 1]
    ids = [1] + [2 + sum(map(ord, w)) * 31 % (vocab_size - 2) for w in words]
    mask = [1] * len(ids)
    pad = max_len - len(ids)
    return ids + [0] * pad, mask + [0] * pad


class LitDataset(Dataset):
    def __init__(self, rows, inference_only=False):
        self.rows = rows
        self.inference_only = inference_only

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        ids, mask = simple_tokenize(self.rows[index]["excerpt"].replace("\n", " "), cfg.max_len, cfg.vocab_size)
        item = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
        if not self.inference_only:
            item["target"] = torch.tensor(float(self.rows[index]["target"]))
        return item


class AttentionHead(nn.Module):
    def __init__(self, in_features, hidden_dim):
        super().__init__()
        self.W = nn.Linear(in_features, hidden_dim)
        self.V = nn.Linear(hidden_dim, 1)

    def forward(self, features, attention_mask):
        att = torch.tanh(self.W(features))
        score = self.V(att).squeeze(-1)
        score = score.masked_fill(attention_mask == 0, -1e9)  # expect: MC501 head
        attention_weights = torch.softmax(score, dim=1)
        return torch.sum(attention_weights.unsqueeze(-1) * features, dim=1)


class LitModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=0)
        self.pos = nn.Embedding(cfg.max_len, cfg.hidden)
        self.blocks = nn.ModuleList([nn.MultiheadAttention(cfg.hidden, cfg.heads, dropout=cfg.dropout, batch_first=True)
                                     for _ in range(cfg.layers)])
        self.ffns = nn.ModuleList([nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden * 4), nn.GELU(),
                                                 nn.Linear(cfg.hidden * 4, cfg.hidden)) for _ in range(cfg.layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(cfg.hidden) for _ in range(cfg.layers * 2)])
        self.head = AttentionHead(cfg.hidden, 256)
        self.regressor = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(cfg.hidden, 1))

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))[None]
        pad = attention_mask == 0
        for i, (attn, ffn) in enumerate(zip(self.blocks, self.ffns)):
            h = self.norms[2 * i](x)
            x = x + attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
            x = x + ffn(self.norms[2 * i + 1](x))
        return self.regressor(self.head(x, attention_mask)).squeeze(-1)


def eval_mse(model, loader):
    model.eval()
    mse_sum, n = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            with torch.autocast(device_type=DEVICE.type, dtype=torch.float16, enabled=USE_AMP):
                pred = model(batch["input_ids"].to(DEVICE), batch["attention_mask"].to(DEVICE))
            mse_sum += F.mse_loss(pred.float(), batch["target"].to(DEVICE), reduction="sum").item()
            n += len(pred)
    return mse_sum / n


def train(model, fold, train_loader, val_loader, optimizer, scheduler, scaler):
    best_val_rmse = None
    step = 0
    for epoch in range(cfg.epochs):
        t0 = time.time()
        for batch in train_loader:
            model.train()
            with torch.autocast(device_type=DEVICE.type, dtype=torch.float16, enabled=USE_AMP):
                pred = model(batch["input_ids"].to(DEVICE), batch["attention_mask"].to(DEVICE))
                loss = F.mse_loss(pred.float(), batch["target"].to(DEVICE))
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            if step % cfg.evaluate_every == 0:
                val_rmse = math.sqrt(eval_mse(model, val_loader))
                if best_val_rmse is None or val_rmse < best_val_rmse:
                    best_val_rmse = val_rmse
                    torch.save(model.state_dict(), f"commonlit_fold{fold}.pth")
                print(f"fold {fold} step {step} train_mse {loss.item():.4f} val_rmse {val_rmse:.4f} "
                      f"best {best_val_rmse:.4f} ({time.time() - t0:.0f}s)")
    return best_val_rmse


def create_optimizer(model):
    head_params = [p for n, p in model.named_parameters() if n.startswith(("head", "regressor"))]
    body_params = [p for n, p in model.named_parameters() if not n.startswith(("head", "regressor"))]
    return torch.optim.AdamW([{"params": body_params, "lr": cfg.lr},
                              {"params": head_params, "lr": cfg.head_lr}], weight_decay=cfg.weight_decay)


if __name__ == "__main__":
    rmses = []
    for fold in cfg.folds_to_run:
        tr = [r for r, k in zip(train_data, kfold) if k != fold]
        va = [r for r, k in zip(train_data, kfold) if k == fold]
        train_loader = DataLoader(LitDataset(tr), batch_size=cfg.batch_size, shuffle=True, drop_last=True)
        val_loader = DataLoader(LitDataset(va), batch_size=cfg.batch_size * 2)
        model = LitModel().to(DEVICE)
        if cfg.fp16 and DEVICE.type == "cuda":
            print("training with mixed precision (float16 autocast + GradScaler)")
        optimizer = create_optimizer(model)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs * len(train_loader))
        scaler = torch.amp.GradScaler("cuda", enabled=USE_AMP)
        rmses.append(train(model, fold, train_loader, val_loader, optimizer, scheduler, scaler))
        del model
        gc.collect()
    print("CV RMSE:", np.mean(rmses))
