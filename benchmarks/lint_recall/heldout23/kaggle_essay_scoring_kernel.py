"""Kaggle kernel, "Feedback Prize - English Language Learning": a from-scratch transformer baseline.

One long notebook script in the competition's usual shape: CFG class, seed_everything, Dataset
and the dynamic-padding collate, a small transformer regressor with an attention-pooling head, train/valid
loops with AMP (`CFG.apex`, float16 autocast and GradScaler on the GPU) and inference.
The tokenizer is a toy hash tokenizer so the kernel runs without a download.

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md section 2.3 and
section 3 item 18 (`masked_fill(mask, -1e9)` on float16 scores under AMP raises "value cannot be
converted to type at::Half without overflow").
"""
import math
import os
import random

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class CFG:
    seed = 42
    apex = True
    max_len = 48
    batch_size = 4
    epochs = 2
    lr = 3e-4
    d_model = 64
    n_heads = 4
    n_layers = 2
    vocab_size = 1000
    target_cols = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]


def seed_everything(seed=42):
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    torch.manual_seed(seed)


def tokenize(text):
    ids = [2] + [3 + sum(map(ord, w)) % (CFG.vocab_size - 3) for w in text.lower().split()][: CFG.max_len - 1]
    return {"input_ids": ids + [0] * (CFG.max_len - len(ids)), "attention_mask": [1] * len(ids) + [0] * (CFG.max_len - len(ids))}


class TrainDataset(Dataset):
    def __init__(self, texts, labels):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, item):
        inputs = {k: torch.tensor(v, dtype=torch.long) for k, v in tokenize(self.texts[item]).items()}
        return inputs, torch.tensor(self.labels[item], dtype=torch.float)


def collate(inputs):
    mask_len = int(inputs["attention_mask"].sum(axis=1).max())
    for k, v in inputs.items():
        inputs[k] = inputs[k][:, :mask_len]
    return inputs


class SelfAttentionBlock(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, attention_mask):
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.h)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, -1e9)  # expect: MC501 kernel
        x = x + self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, D))
        return x + self.ff(self.ln2(x))


class AttentionPooling(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.attn = nn.MultiheadAttention(d, 1, batch_first=True)

    def forward(self, last_hidden_state, attention_mask):
        q = self.query.expand(last_hidden_state.shape[0], -1, -1)
        pooled, _ = self.attn(q, last_hidden_state, last_hidden_state, key_padding_mask=attention_mask == 0, need_weights=False)
        return pooled.squeeze(1)


class CustomModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=0)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList([SelfAttentionBlock(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers)])
        self.pool = AttentionPooling(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, len(cfg.target_cols))

    def forward(self, inputs):
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x, mask)
        return self.fc(self.pool(x, mask))


def train_fn(train_loader, model, criterion, optimizer, device, use_amp):
    model.train()
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    losses = []
    for inputs, labels in train_loader:
        inputs = {k: v.to(device) for k, v in collate(inputs).items()}
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_amp):
            loss = criterion(model(inputs), labels.to(device))
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return sum(losses) / len(losses)


@torch.no_grad()
def inference_fn(test_loader, model, device):
    model.eval()
    return torch.cat([model({k: v.to(device) for k, v in collate(inputs).items()}).float().cpu()
                      for inputs, _ in test_loader])


if __name__ == "__main__":
    seed_everything(CFG.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    use_amp = CFG.apex and device.type == "cuda"
    words = "i think that students should learn online because it is good for them and their future".split()
    texts = [" ".join(random.choices(words, k=random.randint(5, 40))) for _ in range(24)]
    labels = [[random.choice([2.5, 3.0, 3.5, 4.0]) for _ in CFG.target_cols] for _ in texts]
    train_loader = DataLoader(TrainDataset(texts, labels), batch_size=CFG.batch_size, shuffle=True)
    model = CustomModel(CFG).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr)
    criterion = nn.SmoothL1Loss()
    for epoch in range(CFG.epochs):
        print(f"Epoch {epoch + 1} - avg_loss: {train_fn(train_loader, model, criterion, optimizer, device, use_amp):.4f}")
    predictions = inference_fn(DataLoader(TrainDataset(texts[:8], labels[:8]), batch_size=CFG.batch_size), model, device)
    print("predictions:", tuple(predictions.shape), "finite:", torch.isfinite(predictions).all().item())
