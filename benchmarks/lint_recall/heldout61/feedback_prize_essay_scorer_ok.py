"""Feedback Prize - English Language Learning: six analytic scores per essay, encoder with attention pooling.

Source: conventions.md §1 (direction cheat-sheet), §5 item 1; seed masked_fill_inplace.txt; seed self_attention_mask_guide.txt §7 Q1.
"""
import os
import gc
import re
import csv
import math
import time
import random
import warnings

import numpy as np

warnings.filterwarnings("ignore")


class CFG:
    competition = "feedback-prize-english-language-learning"
    train_path = "../input/feedback-prize-english-language-learning/train.csv"
    target_cols = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]
    seed = 42
    n_fold = 4
    trn_fold = [0]
    max_len = 128
    vocab_size = 3000
    hidden_size = 128
    num_heads = 4
    num_layers = 2
    dropout = 0.1
    batch_size = 16
    epochs = 2
    encoder_lr = 2e-4
    head_lr = 1e-3
    weight_decay = 0.01
    max_grad_norm = 1000
    num_workers = 0
    print_freq = 20
    synthetic_essays = 320


def seed_everything(seed):
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)


seed_everything(CFG.seed)

WORDS = ("student school think because people would important help their could also important time "
         "example other many should learn online classes teacher friends family when good better").split()


def synthetic_essays(n):
    rows = []
    for i in range(n):
        k = random.randint(30, 160)
        text = " ".join(random.choices(WORDS, k=k))
        base = 2.0 + 2.0 * min(k, 160) / 160.0
        row = {"text_id": f"E{i:06d}", "full_text": text}
        for c in CFG.target_cols:
            row[c] = str(round(min(5.0, max(1.0, base + random.gauss(0, 0.3))) * 2) / 2)
        rows.append(row)
    return rows


if os.path.exists(CFG.train_path):
    with open(CFG.train_path, newline="", encoding="utf-8") as f:
        train = list(csv.DictReader(f))
else:
    train = synthetic_essays(CFG.synthetic_essays)

labels = np.array([[float(r[c]) for c in CFG.target_cols] for r in train], dtype=np.float32)
print(f"essays: {len(train)}, label mean: {labels.mean(0).round(3)}")

fold_of = np.zeros(len(train), dtype=int)
order = np.argsort(labels.mean(1) + np.random.rand(len(train)) * 1e-3)
for i, j in enumerate(order):
    fold_of[j] = i % CFG.n_fold

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(CFG.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class HashingTokenizer:
    pad_token_id = 0
    cls_token_id = 1
    sep_token_id = 2

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def _ids(self, text):
        return [3 + (hash(w) % (self.vocab_size - 3)) for w in re.findall(r"\w+|[^\w\s]", text.lower())]

    def __call__(self, text, max_length, padding="max_length", truncation=True):
        ids = [self.cls_token_id] + self._ids(text)[: max_length - 2] + [self.sep_token_id]
        mask = [1] * len(ids)
        if padding == "max_length":
            ids = ids + [self.pad_token_id] * (max_length - len(ids))
            mask = mask + [0] * (max_length - len(mask))
        return {"input_ids": ids, "attention_mask": mask}


tokenizer = HashingTokenizer(CFG.vocab_size)


def prepare_input(cfg, text):
    inputs = tokenizer(text, max_length=cfg.max_len, padding="max_length", truncation=True)
    return {k: torch.tensor(v, dtype=torch.long) for k, v in inputs.items()}


class TrainDataset(Dataset):
    def __init__(self, cfg, rows, labels):
        self.cfg = cfg
        self.texts = [r["full_text"] for r in rows]
        self.labels = labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, item):
        inputs = prepare_input(self.cfg, self.texts[item])
        return inputs, torch.tensor(self.labels[item], dtype=torch.float)


def collate(inputs):
    mask_len = int(inputs["attention_mask"].sum(axis=1).max())
    for k, v in inputs.items():
        inputs[k] = inputs[k][:, :mask_len]
    return inputs


class MiniBackbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_len, cfg.hidden_size)
        layer = nn.TransformerEncoderLayer(cfg.hidden_size, cfg.num_heads, cfg.hidden_size * 4,
                                           cfg.dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.hidden_size)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.embeddings(input_ids) + self.position_embeddings(pos)[None]
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        return self.norm(h)


class AttentionPooling(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.attention = nn.Sequential(nn.Linear(hidden_size, 512), nn.Tanh(), nn.Linear(512, 1))

    def forward(self, last_hidden_state, attention_mask):
        w = self.attention(last_hidden_state).squeeze(-1).float()
        w = w.masked_fill(attention_mask == 0, torch.finfo(w.dtype).min)
        w = torch.softmax(w, dim=1)
        return torch.sum(w.unsqueeze(-1) * last_hidden_state, dim=1)


class CustomModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = MiniBackbone(cfg)
        self.pool = AttentionPooling(cfg.hidden_size)
        self.fc_dropout = nn.Dropout(cfg.dropout)
        self.fc = nn.Linear(cfg.hidden_size, len(cfg.target_cols))
        nn.init.normal_(self.fc.weight, std=0.02)
        nn.init.constant_(self.fc.bias, 3.0)

    def feature(self, inputs):
        last_hidden_states = self.model(inputs["input_ids"], inputs["attention_mask"])
        return self.pool(last_hidden_states, inputs["attention_mask"])

    def forward(self, inputs):
        return self.fc(self.fc_dropout(self.feature(inputs)))


def MCRMSE(y_trues, y_preds):
    scores = [math.sqrt(float(np.mean((y_trues[:, i] - y_preds[:, i]) ** 2))) for i in range(y_trues.shape[1])]
    return float(np.mean(scores)), scores


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train_fn(fold, train_loader, model, criterion, optimizer, epoch, scheduler):
    model.train()
    losses = AverageMeter()
    for step, (inputs, labels) in enumerate(train_loader):
        inputs = collate(inputs)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        labels = labels.to(device)
        y_preds = model(inputs)
        loss = criterion(y_preds, labels)
        losses.update(loss.item(), labels.size(0))
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CFG.max_grad_norm)
        optimizer.step()
        scheduler.step()
        if step % CFG.print_freq == 0 or step == len(train_loader) - 1:
            print(f"Epoch: [{epoch + 1}][{step}/{len(train_loader)}] Loss: {losses.val:.4f}({losses.avg:.4f}) "
                  f"Grad: {grad_norm:.4f} LR: {scheduler.get_last_lr()[0]:.8f}")
    return losses.avg


@torch.no_grad()
def valid_fn(valid_loader, model, criterion):
    model.eval()
    losses = AverageMeter()
    preds = []
    for inputs, labels in valid_loader:
        inputs = collate(inputs)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        y_preds = model(inputs)
        losses.update(criterion(y_preds, labels.to(device)).item(), labels.size(0))
        preds.append(y_preds.cpu().numpy())
    return losses.avg, np.concatenate(preds)


def get_optimizer_params(model, encoder_lr, head_lr, weight_decay):
    no_decay = ["bias", "norm"]
    return [
        {"params": [p for n, p in model.model.named_parameters() if not any(nd in n for nd in no_decay)],
         "lr": encoder_lr, "weight_decay": weight_decay},
        {"params": [p for n, p in model.model.named_parameters() if any(nd in n for nd in no_decay)],
         "lr": encoder_lr, "weight_decay": 0.0},
        {"params": [p for n, p in model.named_parameters() if "model" not in n], "lr": head_lr, "weight_decay": 0.0},
    ]


def train_loop(fold):
    trn_idx = np.where(fold_of != fold)[0]
    val_idx = np.where(fold_of == fold)[0]
    train_dataset = TrainDataset(CFG, [train[i] for i in trn_idx], labels[trn_idx])
    valid_dataset = TrainDataset(CFG, [train[i] for i in val_idx], labels[val_idx])
    train_loader = DataLoader(train_dataset, batch_size=CFG.batch_size, shuffle=True,
                              num_workers=CFG.num_workers, drop_last=True)
    valid_loader = DataLoader(valid_dataset, batch_size=CFG.batch_size * 2, shuffle=False,
                              num_workers=CFG.num_workers)
    model = CustomModel(CFG).to(device)
    optimizer = torch.optim.AdamW(get_optimizer_params(model, CFG.encoder_lr, CFG.head_lr, CFG.weight_decay))
    num_train_steps = len(train_loader) * CFG.epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, num_train_steps) / num_train_steps)))
    criterion = nn.SmoothL1Loss(reduction="mean")
    best_score = np.inf
    for epoch in range(CFG.epochs):
        start_time = time.time()
        avg_loss = train_fn(fold, train_loader, model, criterion, optimizer, epoch, scheduler)
        avg_val_loss, predictions = valid_fn(valid_loader, model, criterion)
        score, scores = MCRMSE(labels[val_idx], predictions)
        print(f"Epoch {epoch + 1} - avg_train_loss: {avg_loss:.4f} avg_val_loss: {avg_val_loss:.4f} "
              f"time: {time.time() - start_time:.0f}s Score: {score:.4f} Scores: {np.round(scores, 4)}")
        if score < best_score:
            best_score = score
            torch.save({"model": model.state_dict(), "predictions": predictions},
                       f"fb3_fold{fold}_best.pth")
    del model
    gc.collect()
    return best_score


if __name__ == "__main__":
    fold_scores = [train_loop(fold) for fold in CFG.trn_fold]
    print(f"CV MCRMSE: {np.mean(fold_scores):.4f}")
