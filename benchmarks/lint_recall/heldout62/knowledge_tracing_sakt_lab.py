"""Educational Data Mining, Lab 5: Self-Attentive Knowledge Tracing from scratch.

We rebuild SAKT (Pandey & Karypis, 2019) one piece at a time on a small synthetic
ASSISTments-style log: every exercise is tagged with one skill, students answer
exercises in sequence, and the model predicts whether the next answer is correct
from the student's past interactions. Part 4 of the lab repeats the training loop
in mixed precision (``--fp16``), as the course cluster's GPUs are used.

    python knowledge_tracing_sakt_lab.py            # parts 1-3
    python knowledge_tracing_sakt_lab.py --fp16     # part 4

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3 item 18); conventions.md §2.3
"""
import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

N_SKILLS = 6
N_EXERCISES = 30
MAX_LEN = 40
PAD = 0


def make_students(n_students, seed=0):
    rng = random.Random(seed)
    skill_of = [rng.randrange(N_SKILLS) for _ in range(N_EXERCISES)]
    difficulty = [rng.uniform(-1.0, 1.0) for _ in range(N_EXERCISES)]
    students = []
    for _ in range(n_students):
        mastery = [rng.gauss(0.0, 1.0) for _ in range(N_SKILLS)]
        seq = []
        for _ in range(rng.randint(8, MAX_LEN)):
            e = rng.randrange(N_EXERCISES)
            p = 1.0 / (1.0 + math.exp(-(mastery[skill_of[e]] - difficulty[e])))
            correct = int(rng.random() < p)
            mastery[skill_of[e]] += 0.3 if correct else 0.1
            seq.append((e + 1, correct))
        students.append(seq)
    return students


def to_tensors(students):
    width = MAX_LEN - 1
    interactions = torch.full((len(students), width), PAD, dtype=torch.long)
    queries = torch.full_like(interactions, PAD)
    targets = torch.zeros(len(students), width)
    valid = torch.zeros(len(students), width, dtype=torch.bool)
    for i, seq in enumerate(students):
        n = len(seq) - 1
        interactions[i, :n] = torch.tensor([e + N_EXERCISES * c for e, c in seq[:-1]])
        queries[i, :n] = torch.tensor([e for e, _ in seq[1:]])
        targets[i, :n] = torch.tensor([float(c) for _, c in seq[1:]])
        valid[i, :n] = True
    return interactions, queries, targets, valid


def future_mask(length, device=None):
    return torch.triu(torch.ones(length, length, dtype=torch.bool, device=device), diagonal=1)


class SAKTAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        assert d_model % n_heads == 0
        self.h = n_heads
        self.d_k = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask):
        q = self.split(self.w_q(query))
        k = self.split(self.w_k(key))
        v = self.split(self.w_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        scores = scores.masked_fill(mask, -1e9)  # expect: MC501 literal
        attn = self.drop(scores.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(query.shape)
        return self.w_o(out), attn


class SAKT(nn.Module):
    def __init__(self, d_model=32, n_heads=4, dropout=0.1):
        super().__init__()
        self.interaction_emb = nn.Embedding(2 * N_EXERCISES + 1, d_model, padding_idx=PAD)
        self.exercise_emb = nn.Embedding(N_EXERCISES + 1, d_model, padding_idx=PAD)
        self.pos_emb = nn.Embedding(MAX_LEN, d_model)
        self.attn = SAKTAttention(d_model, n_heads, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, 1)

    def forward(self, interactions, queries):
        t = interactions.size(1)
        pos = torch.arange(t, device=interactions.device)
        m = self.interaction_emb(interactions) + self.pos_emb(pos)
        e = self.exercise_emb(queries)
        blocked = future_mask(t, interactions.device)[None, None] | (interactions == PAD)[:, None, None, :]
        h, attn = self.attn(e, m, m, blocked)
        h = self.norm1(e + self.drop(h))
        h = self.norm2(h + self.drop(self.ffn(h)))
        return self.head(h).squeeze(-1), attn


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return ((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def evaluate(model, data, device):
    model.eval()
    interactions, queries, targets, valid = (x.to(device) for x in data)
    with torch.no_grad():
        logits, _ = model(interactions, queries)
    probs = torch.sigmoid(logits.float())[valid].cpu()
    labels = targets[valid].cpu()
    acc = ((probs > 0.5).float() == labels).float().mean().item()
    return auc(probs, labels), acc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    print("Part 1: the data")
    train = to_tensors(make_students(320, seed=1))
    test = to_tensors(make_students(80, seed=2))
    print("interactions", tuple(train[0].shape), "answered", int(train[3].sum()), "correct rate", round(train[2][train[3]].mean().item(), 3))

    print("Part 2: the mask")
    demo = future_mask(5)
    print(demo.int())
    assert demo.dtype == torch.bool and not demo.diagonal().any()

    print("Part 3: training" + (" (part 4: float16 autocast)" if args.fp16 else ""))
    model = SAKT().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=args.fp16 and device.type == "cuda")
    n = train[0].size(0)
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(n)
        total = 0.0
        for start in range(0, n, args.batch_size):
            idx = perm[start:start + args.batch_size]
            interactions, queries, targets, valid = (x[idx].to(device) for x in train)
            with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=args.fp16):
                logits, _ = model(interactions, queries)
            loss = F.binary_cross_entropy_with_logits(logits.float()[valid], targets[valid])
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            total += loss.item() * len(idx)
        test_auc, test_acc = evaluate(model, test, device)
        print(f"epoch {epoch}  train loss {total / n:.4f}  test AUC {test_auc:.3f}  acc {test_acc:.3f}")

    _, attn = model(test[0][:1].to(device), test[1][:1].to(device))
    print("attention of the first student, head 0, last 3 queries:")
    print(attn[0, 0, -3:, :8].detach().float().cpu())


if __name__ == "__main__":
    main()
