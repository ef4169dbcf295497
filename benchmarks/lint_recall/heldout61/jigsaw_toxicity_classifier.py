"""Jigsaw Unintended Bias in Toxicity Classification: BiLSTM with a self-attention layer and identity-weighted loss.

Source: seed masked_fill_inplace.txt (区别, 总结).
"""
import os
import re
import gc
import csv
import time
import math
import random
from collections import Counter

import numpy as np

SEED = 1029
MAX_LEN = 72
MAX_FEATURES = 20000
EMBED_SIZE = 64
LSTM_UNITS = 64
ATTN_DIM = 64
BATCH_SIZE = 64
N_EPOCHS = 2
TRAIN_CSV = "../input/jigsaw-unintended-bias-in-toxicity-classification/train.csv"
EMBEDDING_FILES = ["../input/glove840b300dtxt/glove.840B.300d.txt"]
IDENTITY_COLUMNS = ["male", "female", "homosexual_gay_or_lesbian", "christian", "jewish", "muslim",
                    "black", "white", "psychiatric_or_mental_illness"]
AUX_COLUMNS = ["target", "severe_toxicity", "obscene", "identity_attack", "insult", "threat"]

random.seed(SEED)
np.random.seed(SEED)

TOXIC = ["idiot", "stupid", "hate", "dumb", "trash", "moron", "pathetic", "loser"]
NEUTRAL = ["the", "people", "article", "think", "government", "this", "would", "should", "tax", "city",
           "vote", "community", "news", "good", "right", "time", "really", "agree", "women", "men"]


def synthetic_comments(n=800):
    rows = []
    for _ in range(n):
        words = random.choices(NEUTRAL, k=random.randint(5, 60))
        tox = random.random() < 0.3
        if tox:
            for _ in range(random.randint(1, 3)):
                words.insert(random.randint(0, len(words)), random.choice(TOXIC))
        row = {"comment_text": " ".join(words), "target": str(float(tox) * random.uniform(0.5, 1.0))}
        for c in IDENTITY_COLUMNS:
            row[c] = str(float(random.random() < 0.05))
        for c in AUX_COLUMNS[1:]:
            row[c] = str(float(tox) * random.random())
        rows.append(row)
    return rows


if os.path.exists(TRAIN_CSV):
    with open(TRAIN_CSV, newline="", encoding="utf-8") as f:
        train_rows = list(csv.DictReader(f))
else:
    train_rows = synthetic_comments()

PUNCT = "/-'?!.,#$%\"()*+-/:;<=>@[\\]^_`{|}~" + "“”’"


def preprocess(text):
    text = text.lower()
    for p in PUNCT:
        text = text.replace(p, f" {p} ")
    return re.sub(r"\s+", " ", text).strip()


texts = [preprocess(r["comment_text"]) for r in train_rows]
y_target = np.array([float(r["target"]) for r in train_rows], dtype=np.float32)
y_aux = np.array([[float(r[c] or 0) for c in AUX_COLUMNS] for r in train_rows], dtype=np.float32)
identity = np.array([[float(r[c] or 0) >= 0.5 for c in IDENTITY_COLUMNS] for r in train_rows])

sample_weights = np.ones(len(texts), dtype=np.float32)
sample_weights += identity.sum(axis=1)
sample_weights += (y_target >= 0.5) * (~identity).sum(axis=1)
sample_weights += (y_target < 0.5) * identity.sum(axis=1) * 5
sample_weights /= sample_weights.mean()

counter = Counter(w for t in texts for w in t.split())
word_index = {w: i + 1 for i, (w, _) in enumerate(counter.most_common(MAX_FEATURES - 1))}
print(f"comments {len(texts)}, vocab {len(word_index)}, toxic rate {(y_target >= 0.5).mean():.3f}")


def build_matrix(word_index, paths):
    matrix = np.random.normal(0, 0.3, (len(word_index) + 1, EMBED_SIZE)).astype(np.float32)
    matrix[0] = 0
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                w, *vec = line.rstrip().split(" ")
                if w in word_index and len(vec) >= EMBED_SIZE:
                    matrix[word_index[w]] = np.asarray(vec[:EMBED_SIZE], dtype=np.float32)
    return matrix


embedding_matrix = build_matrix(word_index, EMBEDDING_FILES)


def to_sequence(text):
    ids = [word_index.get(w, 0) for w in text.split()][:MAX_LEN]
    return ids + [0] * (MAX_LEN - len(ids)), min(len(ids), MAX_LEN)


encoded = [to_sequence(t) for t in texts]
x_train = np.array([e[0] for e in encoded], dtype=np.int64)
lengths = np.array([max(1, e[1]) for e in encoded], dtype=np.int64)

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset, DataLoader

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class SpatialDropout(nn.Dropout2d):
    def forward(self, x):
        x = x.unsqueeze(2).permute(0, 3, 2, 1)
        x = super().forward(x)
        return x.permute(0, 3, 2, 1).squeeze(2)


class SelfAttention(nn.Module):
    def __init__(self, in_dim, attn_dim):
        super().__init__()
        self.q = nn.Linear(in_dim, attn_dim)
        self.k = nn.Linear(in_dim, attn_dim)
        self.v = nn.Linear(in_dim, in_dim)
        self.scale = 1.0 / math.sqrt(attn_dim)

    def forward(self, h, keep):
        scores = torch.bmm(self.q(h), self.k(h).transpose(1, 2)) * self.scale
        scores.masked_fill(~keep[:, None, :], float("-inf"))  # expect: MC525 discarded
        attn = F.softmax(scores, dim=-1)
        return torch.bmm(attn, self.v(h))


class NeuralNet(nn.Module):
    def __init__(self, embedding_matrix, num_aux_targets):
        super().__init__()
        max_features, embed_size = embedding_matrix.shape
        self.embedding = nn.Embedding(max_features, embed_size, padding_idx=0)
        self.embedding.weight = nn.Parameter(torch.tensor(embedding_matrix, dtype=torch.float32))
        self.embedding.weight.requires_grad = False
        self.embedding_dropout = SpatialDropout(0.3)
        self.lstm1 = nn.LSTM(embed_size, LSTM_UNITS, bidirectional=True, batch_first=True)
        self.lstm2 = nn.LSTM(LSTM_UNITS * 2, LSTM_UNITS, bidirectional=True, batch_first=True)
        self.attention = SelfAttention(LSTM_UNITS * 2, ATTN_DIM)
        self.linear1 = nn.Linear(LSTM_UNITS * 6, LSTM_UNITS * 6)
        self.linear_out = nn.Linear(LSTM_UNITS * 6, 1)
        self.linear_aux_out = nn.Linear(LSTM_UNITS * 6, num_aux_targets)

    def forward(self, x, lengths):
        keep = torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]
        h = self.embedding_dropout(self.embedding(x))
        h1, _ = self.lstm1(h)
        h2, _ = self.lstm2(h1)
        a = self.attention(h2, keep)
        neg = torch.finfo(h2.dtype).min
        max_pool = h2.masked_fill(~keep[..., None], neg).max(dim=1).values
        avg_pool = (h2 * keep[..., None]).sum(1) / lengths[:, None].clamp(min=1)
        att_pool = (a * keep[..., None]).sum(1) / lengths[:, None].clamp(min=1)
        h_conc = torch.cat((max_pool, avg_pool, att_pool), 1)
        hidden = h_conc + F.relu(self.linear1(h_conc))
        return torch.cat([self.linear_out(hidden), self.linear_aux_out(hidden)], 1)


def custom_loss(data, targets):
    bce1 = nn.BCEWithLogitsLoss(weight=targets[:, 1:2])(data[:, :1], targets[:, :1])
    bce2 = nn.BCEWithLogitsLoss()(data[:, 1:], targets[:, 2:])
    return bce1 + bce2


def roc_auc(y, p):
    y = np.asarray(y) >= 0.5
    if y.all() or (~y).all():
        return float("nan")
    ranks = np.argsort(np.argsort(p)) + 1
    return float((ranks[y].sum() - y.sum() * (y.sum() + 1) / 2) / (y.sum() * (~y).sum()))


def train_model(model, train_ds, valid_x, valid_len, n_epochs=N_EPOCHS, lr=1e-3):
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.6 ** epoch)
    loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True)
    for epoch in range(n_epochs):
        start_time = time.time()
        model.train()
        avg_loss = 0.0
        for x_b, len_b, y_b in loader:
            y_pred = model(x_b.to(device), len_b.to(device))
            loss = custom_loss(y_pred, y_b.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            avg_loss += loss.item() / len(loader)
        scheduler.step()
        model.eval()
        with torch.no_grad():
            preds = torch.sigmoid(model(valid_x.to(device), valid_len.to(device))[:, 0]).cpu().numpy()
        print(f"Epoch {epoch + 1}/{n_epochs} loss={avg_loss:.4f} time={time.time() - start_time:.1f}s")
    return preds


n_valid = len(texts) // 5
y_train_all = np.hstack([y_target[:, None], sample_weights[:, None], y_aux])
train_ds = TensorDataset(torch.tensor(x_train[n_valid:]), torch.tensor(lengths[n_valid:]),
                         torch.tensor(y_train_all[n_valid:]))
valid_x, valid_len = torch.tensor(x_train[:n_valid]), torch.tensor(lengths[:n_valid])

if __name__ == "__main__":
    all_preds = []
    for model_idx in range(2):
        torch.manual_seed(SEED + model_idx)
        model = NeuralNet(embedding_matrix, y_aux.shape[-1]).to(device)
        all_preds.append(train_model(model, train_ds, valid_x, valid_len))
        del model
        gc.collect()
    blend = np.mean(all_preds, axis=0)
    print(f"valid overall AUC: {roc_auc(y_target[:n_valid], blend):.4f}")
    for i, col in enumerate(IDENTITY_COLUMNS):
        sub = identity[:n_valid, i]
        if sub.sum() > 1:
            print(f"{col:>36s} subgroup AUC: {roc_auc(y_target[:n_valid][sub], blend[sub]):.4f}")
