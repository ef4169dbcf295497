"""Google QUEST Q&A Labeling: 30 subjective targets for question/answer pairs, encoder with per-target-group query pooling.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); conventions.md §1 (direction cheat-sheet), §5 item 1.
"""
import os
import gc
import re
import csv
import math
import time
import random

import numpy as np

SEED = 42
PATH = "../input/google-quest-challenge/"
MAX_SEQUENCE_LENGTH = 128
MAX_TITLE = 24
MAX_QUESTION = 50
VOCAB = 6000
HIDDEN = 96
N_HEADS = 4
N_LAYERS = 2
BATCH_SIZE = 16
EPOCHS = 3
LR = 4e-4

QUESTION_TARGETS = ["question_asker_intent_understanding", "question_body_critical", "question_conversational",
                    "question_expect_short_answer", "question_fact_seeking", "question_has_commonly_accepted_answer",
                    "question_interestingness_others", "question_interestingness_self", "question_multi_intent",
                    "question_not_really_a_question", "question_opinion_seeking", "question_type_choice",
                    "question_type_compare", "question_type_consequence", "question_type_definition",
                    "question_type_entity", "question_type_instructions", "question_type_procedure",
                    "question_type_reason_explanation", "question_type_spelling", "question_well_written"]
ANSWER_TARGETS = ["answer_helpful", "answer_level_of_information", "answer_plausible", "answer_relevance",
                  "answer_satisfaction", "answer_type_instructions", "answer_type_procedure",
                  "answer_type_reason_explanation", "answer_well_written"]
TARGETS = QUESTION_TARGETS + ANSWER_TARGETS

random.seed(SEED)
np.random.seed(SEED)

LEX = ("how why what python function error install use code file server linux windows data value "
       "because you can should try the a is it this that run command version set").split()


def make_synthetic(n=320):
    rows = []
    for i in range(n):
        how = random.random() < 0.5
        row = {"qa_id": str(i),
               "question_title": ("how to " if how else "why does ") + " ".join(random.choices(LEX, k=6)),
               "question_body": " ".join(random.choices(LEX, k=random.randint(10, 60))),
               "answer": " ".join(random.choices(LEX, k=random.randint(5, 90)))}
        for t in TARGETS:
            base = 0.8 if ("instructions" in t or "procedure" in t) == how else 0.3
            row[t] = f"{min(1.0, max(0.0, base + random.gauss(0, 0.15))):.4f}"
        rows.append(row)
    return rows


if os.path.exists(PATH + "train.csv"):
    with open(PATH + "train.csv", newline="", encoding="utf-8") as f:
        df_train = list(csv.DictReader(f))
else:
    df_train = make_synthetic()
print("train shape:", len(df_train), "x", len(df_train[0]))

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class QuestTokenizer:
    pad_token_id, cls_token_id, sep_token_id = 0, 1, 2

    def tokenize(self, text):
        return [3 + (sum(ord(c) * (i + 1) for i, c in enumerate(w)) % (VOCAB - 3))
                for w in re.findall(r"\w+", text.lower())]

    def __call__(self, title, question, answer, max_length):
        t, q, a = self.tokenize(title)[:MAX_TITLE], self.tokenize(question), self.tokenize(answer)
        q = q[:MAX_QUESTION]
        a = a[: max_length - len(t) - len(q) - 4]
        ids = [self.cls_token_id] + t + [self.sep_token_id] + q + [self.sep_token_id] + a + [self.sep_token_id]
        types = [0] * (len(t) + len(q) + 3) + [1] * (len(a) + 1)
        pad = max_length - len(ids)
        return {"input_ids": ids + [self.pad_token_id] * pad,
                "attention_mask": [1] * len(ids) + [0] * pad,
                "token_type_ids": types + [0] * pad}


tokenizer = QuestTokenizer()


class QuestDataset(Dataset):
    def __init__(self, rows, train=True):
        self.rows = rows
        self.train = train

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        r = self.rows[idx]
        enc = tokenizer(r["question_title"], r["question_body"], r["answer"], MAX_SEQUENCE_LENGTH)
        item = {k: torch.tensor(v) for k, v in enc.items()}
        if self.train:
            item["labels"] = torch.tensor([float(r[t]) for t in TARGETS])
        return item


class QuestModel(nn.Module):
    def __init__(self, n_groups=2):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN, padding_idx=0)
        self.position = nn.Embedding(MAX_SEQUENCE_LENGTH, HIDDEN)
        self.token_type = nn.Embedding(2, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, N_HEADS, HIDDEN * 4, 0.1, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False)
        self.group_queries = nn.Parameter(torch.randn(n_groups, HIDDEN) * 0.02)
        self.kv = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.q_head = nn.Linear(HIDDEN, len(QUESTION_TARGETS))
        self.a_head = nn.Linear(HIDDEN, len(ANSWER_TARGETS))
        self.dropout = nn.Dropout(0.2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        B, L = input_ids.shape
        pos = torch.arange(L, device=input_ids.device)
        x = self.word(input_ids) + self.position(pos)[None] + self.token_type(token_type_ids)
        pad = attention_mask == 0
        x = self.encoder(x, src_key_padding_mask=pad)
        k, v = self.kv(x).chunk(2, dim=-1)
        k = k.view(B, L, N_HEADS, -1).transpose(1, 2)
        v = v.view(B, L, N_HEADS, -1).transpose(1, 2)
        q = self.group_queries.view(1, -1, N_HEADS, HIDDEN // N_HEADS).transpose(1, 2).expand(B, -1, -1, -1)
        pooled = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])  # expect: MC511 groups
        pooled = pooled.transpose(1, 2).reshape(B, -1, HIDDEN)
        cls = x[:, 0]
        q_logits = self.q_head(self.dropout(pooled[:, 0] + cls))
        a_logits = self.a_head(self.dropout(pooled[:, 1] + cls))
        return torch.cat([q_logits, a_logits], dim=-1)


def spearman_col(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    if ra.std() == 0 or rb.std() == 0:
        return np.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def compute_spearmanr(trues, preds):
    return float(np.nanmean([spearman_col(trues[:, i], preds[:, i] + np.random.normal(0, 1e-7, preds.shape[0]))
                             for i in range(trues.shape[1])]))


def train_and_validate(train_rows, valid_rows, fold):
    model = QuestModel().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    tl = DataLoader(QuestDataset(train_rows), batch_size=BATCH_SIZE, shuffle=True, drop_last=True)
    vl = DataLoader(QuestDataset(valid_rows), batch_size=BATCH_SIZE * 2)
    warmup = len(tl)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    best = -1.0
    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        for batch in tl:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            loss = F.binary_cross_entropy_with_logits(model(**batch), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        preds, trues = [], []
        with torch.no_grad():
            for batch in vl:
                batch = {k: v.to(device) for k, v in batch.items()}
                trues.append(batch.pop("labels").cpu().numpy())
                preds.append(torch.sigmoid(model(**batch)).cpu().numpy())
        rho = compute_spearmanr(np.concatenate(trues), np.concatenate(preds))
        print(f"fold {fold} epoch {epoch} loss {loss.item():.4f} spearman {rho:.4f} ({time.time() - t0:.1f}s)")
        best = max(best, rho)
    del model
    gc.collect()
    return best


groups = {}
for r in df_train:
    groups.setdefault(r["question_body"], []).append(r)
group_keys = list(groups)
random.shuffle(group_keys)

if __name__ == "__main__":
    n_folds = 3
    scores = []
    for fold in range(n_folds):
        valid_keys = set(group_keys[fold::n_folds])
        tr = [r for k in group_keys if k not in valid_keys for r in groups[k]]
        va = [r for k in valid_keys for r in groups[k]]
        scores.append(train_and_validate(tr, va, fold))
    print("CV spearman:", np.round(scores, 4), np.mean(scores))
