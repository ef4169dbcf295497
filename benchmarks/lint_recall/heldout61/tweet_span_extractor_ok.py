"""Tweet Sentiment Extraction: start/end span model, transformer encoder trained from scratch.

Source: hyunwoongko/transformer PR #40; bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""
import os
import gc
import csv
import math
import time
import random
import string

import numpy as np


class CFG:
    seed = 42
    train_path = "../input/tweet-sentiment-extraction/train.csv"
    test_path = "../input/tweet-sentiment-extraction/test.csv"
    max_len = 48
    min_freq = 1
    d_model = 96
    n_head = 4
    ffn_hidden = 192
    n_layers = 2
    drop_prob = 0.1
    batch_size = 32
    epochs = 3
    lr = 3e-4
    n_fold = 5
    trn_fold = [0]
    synthetic_rows = 640


def seed_everything(seed=42):
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)


seed_everything(CFG.seed)

POSITIVE = ["love", "great", "happy", "awesome", "fun", "nice", "thanks", "good", "best", "cool"]
NEGATIVE = ["hate", "sad", "bad", "sucks", "tired", "miss", "sorry", "worst", "sick", "boring"]
FILLER = ["the", "day", "today", "work", "i", "my", "so", "just", "is", "it", "you", "going",
          "home", "now", "really", "that", "to", "and", "lol", "morning", "night", "weekend"]


def make_synthetic(n):
    rows = []
    for i in range(n):
        sentiment = random.choice(["positive", "negative", "neutral"])
        words = random.choices(FILLER, k=random.randint(4, 20))
        if sentiment == "neutral":
            selected = " ".join(words)
        else:
            pool = POSITIVE if sentiment == "positive" else NEGATIVE
            span = random.choices(pool, k=random.randint(1, 3))
            at = random.randint(0, len(words))
            words = words[:at] + span + words[at:]
            selected = " ".join(span)
        rows.append({"textID": f"t{i:05d}", "text": " ".join(words),
                     "selected_text": selected, "sentiment": sentiment})
    return rows


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["text"]]


train_rows = read_rows(CFG.train_path) if os.path.exists(CFG.train_path) else make_synthetic(CFG.synthetic_rows)
print(f"train rows: {len(train_rows)}")

for r in train_rows:
    r["text"] = " ".join(str(r["text"]).split())
    r["selected_text"] = " ".join(str(r["selected_text"]).split())

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(CFG.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

PAD, UNK, CLS, SEP = "<pad>", "<unk>", "<cls>", "<sep>"
SPECIALS = [PAD, UNK, CLS, SEP, "positive", "negative", "neutral"]


def basic_tokenize(text):
    return text.lower().translate(str.maketrans("", "", string.punctuation)).split()


class WordVocab:
    def __init__(self, rows, min_freq=1):
        counts = {}
        for r in rows:
            for w in basic_tokenize(r["text"]):
                counts[w] = counts.get(w, 0) + 1
        self.itos = list(SPECIALS) + sorted(w for w, c in counts.items() if c >= min_freq and w not in SPECIALS)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.pad_idx = self.stoi[PAD]

    def __len__(self):
        return len(self.itos)

    def encode(self, words):
        return [self.stoi.get(w, self.stoi[UNK]) for w in words]


vocab = WordVocab(train_rows, CFG.min_freq)
print(f"vocab size: {len(vocab)}")


def find_span(words, sel_words):
    n = len(sel_words)
    for i in range(len(words) - n + 1):
        if words[i:i + n] == sel_words:
            return i, i + n - 1
    return 0, len(words) - 1


class TweetDataset(Dataset):
    def __init__(self, rows, vocab, max_len):
        self.rows = rows
        self.vocab = vocab
        self.max_len = max_len

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        r = self.rows[idx]
        words = basic_tokenize(r["text"])[: self.max_len - 3]
        start, end = find_span(words, basic_tokenize(r.get("selected_text", r["text"])))
        ids = self.vocab.encode([CLS, r["sentiment"], SEP]) + self.vocab.encode(words)
        return {"ids": torch.tensor(ids), "start": start + 3, "end": end + 3, "n_words": len(words), "idx": idx}


def collate(batch, pad_idx=vocab.pad_idx):
    ids = nn.utils.rnn.pad_sequence([b["ids"] for b in batch], batch_first=True, padding_value=pad_idx)
    return {
        "ids": ids,
        "start": torch.tensor([b["start"] for b in batch]),
        "end": torch.tensor([b["end"] for b in batch]),
        "n_words": torch.tensor([b["n_words"] for b in batch]),
        "idx": torch.tensor([b["idx"] for b in batch]),
    }


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        pos = torch.arange(max_len).float().unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class ScaleDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        d_k = k.size(-1)
        score = q @ k.transpose(2, 3) / math.sqrt(d_k)
        if mask is not None:
            score = score.masked_fill(mask == 0, torch.finfo(score.dtype).min)
        score = torch.softmax(score, dim=-1)
        return score @ v, score


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.attention = ScaleDotProductAttention()
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_concat = nn.Linear(d_model, d_model)

    def split(self, t):
        b, l, d = t.size()
        return t.view(b, l, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        out, _ = self.attention(q, k, v, mask=mask)
        b, h, l, d = out.size()
        return self.w_concat(out.transpose(1, 2).contiguous().view(b, l, h * d))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_head)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn_hidden), nn.GELU(), nn.Dropout(drop_prob),
                                 nn.Linear(ffn_hidden, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(drop_prob)

    def forward(self, x, src_mask):
        x = self.norm1(x + self.dropout(self.attention(x, x, x, mask=src_mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class TweetSpanModel(nn.Module):
    def __init__(self, vocab_size, pad_idx, cfg):
        super().__init__()
        self.pad_idx = pad_idx
        self.emb = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_idx)
        self.pos = PositionalEncoding(cfg.d_model, cfg.max_len + 8)
        self.layers = nn.ModuleList(
            [EncoderLayer(cfg.d_model, cfg.ffn_hidden, cfg.n_head, cfg.drop_prob) for _ in range(cfg.n_layers)])
        self.dropout = nn.Dropout(cfg.drop_prob)
        self.qa_outputs = nn.Linear(cfg.d_model, 2)

    def make_src_mask(self, src):
        return (src != self.pad_idx).unsqueeze(1).unsqueeze(2)

    def forward(self, ids):
        src_mask = self.make_src_mask(ids)
        x = self.dropout(self.pos(self.emb(ids)))
        for layer in self.layers:
            x = layer(x, src_mask)
        logits = self.qa_outputs(x)
        start_logits, end_logits = logits.unbind(-1)
        pad = ids == self.pad_idx
        start_logits = start_logits.masked_fill(pad, torch.finfo(start_logits.dtype).min)
        end_logits = end_logits.masked_fill(pad, torch.finfo(end_logits.dtype).min)
        return start_logits, end_logits


def jaccard(a, b):
    a, b = set(a.lower().split()), set(b.lower().split())
    if not a and not b:
        return 1.0
    return len(a & b) / max(1, len(a | b))


def decode_span(row, start, end):
    words = basic_tokenize(row["text"])
    if row["sentiment"] == "neutral" or len(words) < 3:
        return row["text"]
    start, end = start - 3, end - 3
    if end < start:
        end = start
    return " ".join(words[max(start, 0): end + 1])


def train_one_epoch(model, loader, optimizer, scheduler):
    model.train()
    total = 0.0
    for batch in loader:
        ids = batch["ids"].to(device)
        start_logits, end_logits = model(ids)
        loss = (F.cross_entropy(start_logits, batch["start"].to(device))
                + F.cross_entropy(end_logits, batch["end"].to(device))) / 2
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        total += loss.item() * ids.size(0)
    return total / len(loader.dataset)


@torch.no_grad()
def valid_one_epoch(model, loader, rows):
    model.eval()
    scores = []
    for batch in loader:
        start_logits, end_logits = model(batch["ids"].to(device))
        starts = start_logits.argmax(-1).tolist()
        ends = end_logits.argmax(-1).tolist()
        for i, idx in enumerate(batch["idx"].tolist()):
            row = rows[idx]
            scores.append(jaccard(decode_span(row, starts[i], ends[i]), row["selected_text"]))
    return float(np.mean(scores))


folds = np.arange(len(train_rows)) % CFG.n_fold
np.random.shuffle(folds)

if __name__ == "__main__":
    for fold in CFG.trn_fold:
        trn = [r for r, f in zip(train_rows, folds) if f != fold]
        val = [r for r, f in zip(train_rows, folds) if f == fold]
        trn_loader = DataLoader(TweetDataset(trn, vocab, CFG.max_len), batch_size=CFG.batch_size,
                                shuffle=True, collate_fn=collate)
        val_loader = DataLoader(TweetDataset(val, vocab, CFG.max_len), batch_size=CFG.batch_size * 2,
                                shuffle=False, collate_fn=collate)
        model = TweetSpanModel(len(vocab), vocab.pad_idx, CFG).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr, weight_decay=0.01)
        total_steps = CFG.epochs * len(trn_loader)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=CFG.lr, total_steps=total_steps)
        best = -1.0
        for epoch in range(CFG.epochs):
            t0 = time.time()
            loss = train_one_epoch(model, trn_loader, optimizer, scheduler)
            score = valid_one_epoch(model, val_loader, val)
            print(f"fold {fold} epoch {epoch + 1} loss {loss:.4f} jaccard {score:.4f} time {time.time() - t0:.1f}s")
            if score > best:
                best = score
                torch.save(model.state_dict(), f"tweet_span_fold{fold}.pth")
        del model, optimizer
        gc.collect()
        print(f"fold {fold} best jaccard {best:.4f}")
