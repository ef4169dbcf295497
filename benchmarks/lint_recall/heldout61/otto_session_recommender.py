"""OTTO - Multi-Objective Recommender System: SASRec-style next-aid model over left-padded session event sequences, Recall@20.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9); rasbt/LLMs-from-scratch#1061 (§3 item 14); seed self_attention_mask_guide.txt §3.
"""
import os
import gc
import json
import math
import time
import random
from collections import defaultdict

import numpy as np

SEED = 7
TRAIN_JSONL = "/kaggle/input/otto-recommender-system/train.jsonl"
N_AIDS = 2000
N_SESSIONS = 1500
MAX_LEN = 30
TYPE2ID = {"clicks": 0, "carts": 1, "orders": 2}
D = 64
HEADS = 2
BLOCKS = 2
DROPOUT = 0.2
BATCH = 128
EPOCHS = 3
LR = 1e-3
TOPK = 20
NEG_SAMPLES = 64

random.seed(SEED)
np.random.seed(SEED)


def synth_sessions(n_sessions, n_aids):
    clusters = np.random.randint(0, 40, size=n_aids)
    by_cluster = defaultdict(list)
    for aid, c in enumerate(clusters):
        by_cluster[c].append(aid)
    sessions = []
    ts = 1659304800
    for s in range(n_sessions):
        c = random.randrange(40)
        events = []
        for _ in range(random.randint(2, MAX_LEN + 10)):
            if random.random() < 0.15:
                c = random.randrange(40)
            aid = random.choice(by_cluster[c]) if by_cluster[c] else random.randrange(n_aids)
            ts += random.randint(5, 600)
            events.append({"aid": aid, "ts": ts, "type": random.choices(list(TYPE2ID), [0.85, 0.1, 0.05])[0]})
        sessions.append({"session": s, "events": events})
    return sessions


def read_jsonl(path, limit):
    out = []
    with open(path) as f:
        for line in f:
            out.append(json.loads(line))
            if len(out) >= limit:
                break
    return out


sessions = read_jsonl(TRAIN_JSONL, N_SESSIONS) if os.path.exists(TRAIN_JSONL) else synth_sessions(N_SESSIONS, N_AIDS)
aid_map = {}
for s in sessions:
    for e in s["events"]:
        aid_map.setdefault(e["aid"], len(aid_map) + 1)
n_items = len(aid_map) + 1
print(f"sessions {len(sessions)}, aids {n_items - 1}, events {sum(len(s['events']) for s in sessions)}")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def left_pad(seq, length, value=0):
    seq = seq[-length:]
    return [value] * (length - len(seq)) + seq


class SessionDataset(Dataset):
    def __init__(self, sessions, train=True):
        self.items = []
        for s in sessions:
            aids = [aid_map[e["aid"]] for e in s["events"]]
            types = [TYPE2ID[e["type"]] for e in s["events"]]
            if len(aids) < 2:
                continue
            if train:
                self.items.append((aids[:-1], types[:-1], aids[1:]))
            else:
                self.items.append((aids[:-1], types[:-1], [aids[-1]]))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        inp, typ, tgt = self.items[i]
        return (torch.tensor(left_pad(inp, MAX_LEN)), torch.tensor(left_pad(typ, MAX_LEN)),
                torch.tensor(left_pad(tgt, MAX_LEN)))


def future_mask(n, device):
    return torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))  # expect: MC521 future


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        blocked = future_mask(T, x.device)[None, None] | pad[:, None, None, :]
        scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
        attn = self.drop(scores.softmax(-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(B, T, C))


class SASRec(nn.Module):
    def __init__(self, n_items):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, D, padding_idx=0)
        self.type_emb = nn.Embedding(len(TYPE2ID), D)
        self.pos_emb = nn.Embedding(MAX_LEN, D)
        self.attn = nn.ModuleList([CausalSelfAttention(D, HEADS, DROPOUT) for _ in range(BLOCKS)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.Linear(D, D * 2), nn.ReLU(), nn.Dropout(DROPOUT), nn.Linear(D * 2, D))
                                  for _ in range(BLOCKS)])
        self.ln1 = nn.ModuleList([nn.LayerNorm(D) for _ in range(BLOCKS)])
        self.ln2 = nn.ModuleList([nn.LayerNorm(D) for _ in range(BLOCKS)])
        self.last = nn.LayerNorm(D)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, aids, types):
        pad = aids == 0
        pos = torch.arange(aids.size(1), device=aids.device)
        x = self.item_emb(aids) * math.sqrt(D) + self.type_emb(types) + self.pos_emb(pos)[None]
        x = self.dropout(x) * (~pad)[..., None]
        for attn, ffn, ln1, ln2 in zip(self.attn, self.ffn, self.ln1, self.ln2):
            x = x + attn(ln1(x), pad)
            x = x + ffn(ln2(x))
            x = x * (~pad)[..., None]
        return self.last(x)


def sampled_softmax_loss(h, targets, item_emb, n_items):
    valid = targets > 0
    h, targets = h[valid], targets[valid]
    negs = torch.randint(1, n_items, (NEG_SAMPLES,), device=h.device)
    pos_logit = (h * item_emb(targets)).sum(-1, keepdim=True)
    neg_logit = h @ item_emb(negs).T
    neg_logit = neg_logit.masked_fill(negs[None, :] == targets[:, None], torch.finfo(neg_logit.dtype).min)
    logits = torch.cat([pos_logit, neg_logit], dim=1)
    return F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=h.device))


@torch.no_grad()
def recall_at_k(model, loader, k=TOPK):
    model.eval()
    hits, total = 0, 0
    all_items = model.item_emb.weight
    for aids, types, tgt in loader:
        h = model(aids.to(device), types.to(device))[:, -1]
        scores = h @ all_items.T
        scores[:, 0] = torch.finfo(scores.dtype).min
        topk = scores.topk(k, dim=-1).indices.cpu()
        hits += (topk == tgt[:, -1:]).any(-1).sum().item()
        total += len(tgt)
    return hits / max(1, total)


random.shuffle(sessions)
cut = int(len(sessions) * 0.9)
train_ds, valid_ds = SessionDataset(sessions[:cut]), SessionDataset(sessions[cut:], train=False)

if __name__ == "__main__":
    model = SASRec(n_items).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98))
    tl = DataLoader(train_ds, batch_size=BATCH, shuffle=True)
    vl = DataLoader(valid_ds, batch_size=BATCH * 2)
    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        for aids, types, tgt in tl:
            aids, types, tgt = aids.to(device), types.to(device), tgt.to(device)
            loss = sampled_softmax_loss(model(aids, types), tgt, model.item_emb, n_items)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f} recall@{TOPK} {recall_at_k(model, vl):.4f} ({time.time() - t0:.1f}s)")
    torch.save(model.state_dict(), "otto_sasrec.pt")
    gc.collect()
