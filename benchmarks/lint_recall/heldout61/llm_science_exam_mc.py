"""Kaggle - LLM Science Exam: five-way multiple choice over retrieved Wikipedia context, chunked cross-encoder.

Source: seed self_attention_mask_guide.txt §6; conventions.md §2.3, §3 item 5 (pytorch/pytorch#103749).
"""
import os
import gc
import csv
import time
import random
import hashlib

import numpy as np

CFG = dict(
    seed=2023,
    train_csv="../input/kaggle-llm-science-exam/train.csv",
    context_csv="../input/wiki-stem-retrieval/train_with_context.csv",
    options="ABCDE",
    global_len=32,
    chunk_len=24,
    n_chunks=4,
    vocab=4096,
    dim=96,
    heads=4,
    layers=2,
    dropout=0.1,
    lr=5e-4,
    epochs=3,
    batch_size=4,
    synthetic_questions=160,
)
CFG["max_len"] = CFG["global_len"] + CFG["chunk_len"] * CFG["n_chunks"]

random.seed(CFG["seed"])
np.random.seed(CFG["seed"])

TOPICS = ["photosynthesis", "entropy", "mitochondria", "neutron", "catalyst", "isotope", "quasar",
          "enzyme", "plasma", "genome", "tectonic", "alkali", "boson", "lattice", "spectrum", "vaccine"]
VERBS = ["increases", "reduces", "converts", "stores", "emits", "binds", "splits", "absorbs"]
OBJECTS = ["energy", "light", "heat", "protons", "electrons", "glucose", "charge", "mass", "water", "signals"]


def synth_question():
    topic = random.choice(TOPICS)
    answer = f"{random.choice(VERBS)} {random.choice(OBJECTS)}"
    wrong = set()
    while len(wrong) < 4:
        w = f"{random.choice(VERBS)} {random.choice(OBJECTS)}"
        if w != answer:
            wrong.add(w)
    opts = list(wrong) + [answer]
    random.shuffle(opts)
    letter = CFG["options"][opts.index(answer)]
    filler = " ".join(random.choices(TOPICS + OBJECTS, k=40))
    context = f"{filler} the {topic} {answer} in most cases {filler}"
    row = {"prompt": f"Which of the following best describes what the {topic} does?",
           "answer": letter, "context": context}
    row.update({k: v for k, v in zip(CFG["options"], opts)})
    return row


def load_rows():
    if os.path.exists(CFG["context_csv"]):
        with open(CFG["context_csv"], newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    return [synth_question() for _ in range(CFG["synthetic_questions"])]


rows = load_rows()
print(len(rows), "questions;", "answer distribution:", {k: sum(r["answer"] == k for r in rows) for k in CFG["options"]})

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(CFG["seed"])
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

PAD_ID, CLS_ID, SEP_ID = 0, 1, 2


def word_id(w):
    return 3 + int(hashlib.md5(w.encode()).hexdigest(), 16) % (CFG["vocab"] - 3)


def tokenize(text):
    return [word_id(w) for w in text.lower().replace("?", " ").replace(".", " ").split()]


def encode_option(prompt, option, context):
    head = [CLS_ID] + tokenize(prompt)[: CFG["global_len"] - 8] + [SEP_ID] + tokenize(option)[:5] + [SEP_ID]
    head = head[: CFG["global_len"]]
    head_keep = [1] * len(head) + [0] * (CFG["global_len"] - len(head))
    head = head + [PAD_ID] * (CFG["global_len"] - len(head))
    ctx = tokenize(context)[: CFG["chunk_len"] * CFG["n_chunks"]]
    ctx_keep = [1] * len(ctx) + [0] * (CFG["chunk_len"] * CFG["n_chunks"] - len(ctx))
    ctx = ctx + [PAD_ID] * (CFG["chunk_len"] * CFG["n_chunks"] - len(ctx))
    segment = [0] * CFG["global_len"] + [1] * (CFG["chunk_len"] * CFG["n_chunks"])
    return head + ctx, head_keep + ctx_keep, segment


class MCDataset(Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        enc = [encode_option(r["prompt"], r[o], r.get("context", "")) for o in CFG["options"]]
        return {
            "input_ids": torch.tensor([e[0] for e in enc]),
            "attention_mask": torch.tensor([e[1] for e in enc]),
            "token_type_ids": torch.tensor([e[2] for e in enc]),
            "label": torch.tensor(CFG["options"].index(r["answer"])),
        }


def build_chunk_bias(seq_len, n_global, chunk):
    chunk_id = torch.zeros(seq_len, dtype=torch.long)
    chunk_id[n_global:] = 1 + torch.arange(seq_len - n_global) // chunk
    bias = torch.zeros(seq_len, seq_len)
    bias[:n_global, :] = 0
    bias[:, :n_global] = 0
    for c in range(1, int(chunk_id.max()) + 1):
        idx = (chunk_id == c).nonzero().squeeze(-1)
        bias[idx[0]: idx[-1] + 1, idx[0]: idx[-1] + 1] = 0
    bias[bias == 0] = float("-inf")  # expect: MC504 chunks
    return bias


class ChunkAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x, bias):
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.proj(out.transpose(1, 2).reshape(B, L, D))


class Block(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = ChunkAttention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim), nn.Dropout(dropout))

    def forward(self, x, bias):
        x = x + self.attn(self.ln1(x), bias)
        return x + self.mlp(self.ln2(x))


class ChunkedCrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(CFG["vocab"], CFG["dim"], padding_idx=PAD_ID)
        self.pos = nn.Embedding(CFG["max_len"], CFG["dim"])
        self.seg = nn.Embedding(2, CFG["dim"])
        self.blocks = nn.ModuleList([Block(CFG["dim"], CFG["heads"], CFG["dropout"]) for _ in range(CFG["layers"])])
        self.norm = nn.LayerNorm(CFG["dim"])
        self.head = nn.Linear(CFG["dim"], 1)
        self.register_buffer("chunk_bias", build_chunk_bias(CFG["max_len"], CFG["global_len"], CFG["chunk_len"]),
                             persistent=False)

    def forward(self, input_ids, attention_mask, token_type_ids):
        B, C, L = input_ids.shape
        ids, keep, seg = input_ids.view(B * C, L), attention_mask.view(B * C, L), token_type_ids.view(B * C, L)
        x = self.tok(ids) + self.pos(torch.arange(L, device=ids.device))[None] + self.seg(seg)
        bias = self.chunk_bias[None, None].masked_fill(keep[:, None, None, :] == 0, float("-inf"))
        for blk in self.blocks:
            x = blk(x, bias)
        return self.head(self.norm(x[:, 0])).view(B, C)


def map_at_3(logits, labels):
    top3 = logits.topk(3, dim=-1).indices
    score = 0.0
    for t, y in zip(top3.tolist(), labels.tolist()):
        for rank, p in enumerate(t):
            if p == y:
                score += 1.0 / (rank + 1)
                break
    return score / len(labels)


def run_epoch(model, loader, optimizer=None):
    train = optimizer is not None
    model.train(train)
    losses, all_logits, all_labels = [], [], []
    for batch in loader:
        batch = {k: v.to(DEVICE) for k, v in batch.items()}
        with torch.set_grad_enabled(train):
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            loss = F.cross_entropy(logits, batch["label"])
        if train:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        losses.append(loss.item())
        all_logits.append(logits.detach().float().cpu())
        all_labels.append(batch["label"].cpu())
    return float(np.mean(losses)), map_at_3(torch.cat(all_logits), torch.cat(all_labels))


split = int(len(rows) * 0.8)
train_ds, valid_ds = MCDataset(rows[:split]), MCDataset(rows[split:])

if __name__ == "__main__":
    model = ChunkedCrossEncoder().to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=0.01)
    train_loader = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=True)
    valid_loader = DataLoader(valid_ds, batch_size=CFG["batch_size"] * 2)
    for epoch in range(CFG["epochs"]):
        t0 = time.time()
        tr_loss, tr_map = run_epoch(model, train_loader, optimizer)
        va_loss, va_map = run_epoch(model, valid_loader)
        print(f"epoch {epoch} train {tr_loss:.4f}/{tr_map:.3f} valid {va_loss:.4f}/{va_map:.3f} {time.time() - t0:.1f}s")
    torch.save(model.state_dict(), "llm_science_chunked.pt")
    gc.collect()
