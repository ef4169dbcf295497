"""Freezing-of-gait detection in Parkinson's disease from a lower-back accelerometer.

Imitates the 1st-place solution of Kaggle's "Parkinson's Freezing of Gait Prediction"
(tlvmc-parkinsons-freezing-gait-prediction, 2023; B. Urazalinov's write-up): each recording's
AccV / AccML / AccAP signal is cut into patches that become the tokens of a transformer
encoder followed by two bidirectional LSTM layers, predicting StartHesitation, Turn and
Walking per patch; the loss and the metric (mean average precision over the three events)
only count patches marked Valid and Task, as in the defog annotations. Written the way the
PyTorch notebooks of the competition write it: a `CFG` class, `FOGDataset` cutting each
recording into windows of `window_patches` patches (the last one padded), a hand-written
`MultiHeadSelfAttention`, `FOGModel`, `train_one_epoch` / `valid_one_epoch`. The recordings
are synthetic: walking at about 2 Hz, turns as a slow mediolateral sway, freezing as a
4-6 Hz trembling with the stride gone.

Source: seed masked_fill_inplace.txt (作用 and 区别); seed self_attention_mask_guide.txt section 2.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CFG:
    seed = 2023
    sample_rate = 50
    patch_size = 25
    window_patches = 24
    d_model = 48
    n_heads = 4
    n_layers = 2
    lstm_hidden = 32
    batch_size = 16
    lr = 2e-3
    epochs = 6
    targets = ["StartHesitation", "Turn", "Walking"]


def simulate_recording(rng, n_seconds):
    n = n_seconds * CFG.sample_rate
    t = np.arange(n) / CFG.sample_rate
    labels = np.zeros((n, 3), dtype=np.float32)
    acc = rng.normal(0, 0.05, (n, 3)).astype(np.float32)
    acc[:, 0] += 1.0
    pos = 0
    while pos < n:
        length = int(rng.integers(2, 8) * CFG.sample_rate)
        event = rng.choice(4, p=[0.35, 0.15, 0.2, 0.3])
        seg = slice(pos, min(pos + length, n))
        if event == 3:
            acc[seg, 0] += 0.3 * np.sin(2 * np.pi * 2.0 * t[seg])
            acc[seg, 2] += 0.2 * np.sin(2 * np.pi * 2.0 * t[seg] + 1.0)
        else:
            labels[seg, event] = 1.0
            acc[seg, 0] += 0.25 * np.sin(2 * np.pi * rng.uniform(4, 6) * t[seg])
            if event == 1:
                acc[seg, 1] += 0.5 * np.sin(2 * np.pi * 0.3 * t[seg]) + 0.3
            if event == 2:
                acc[seg, 2] += 0.3 * np.sin(2 * np.pi * 1.0 * t[seg]) - 0.2
        pos += length
    valid = np.ones(n, dtype=bool)
    valid[: 2 * CFG.sample_rate] = False
    return acc, labels, valid


class FOGDataset(torch.utils.data.Dataset):
    def __init__(self, recordings):
        self.windows = []
        for acc, labels, valid in recordings:
            acc = (acc - acc.mean(0)) / (acc.std(0) + 1e-6)
            n_patches = len(acc) // CFG.patch_size
            acc = acc[: n_patches * CFG.patch_size].reshape(n_patches, -1)
            labels = labels[: n_patches * CFG.patch_size].reshape(n_patches, CFG.patch_size, 3).mean(1) > 0.5
            valid = valid[: n_patches * CFG.patch_size].reshape(n_patches, CFG.patch_size).all(1)
            for start in range(0, n_patches, CFG.window_patches):
                end = min(start + CFG.window_patches, n_patches)
                n = end - start
                x = np.zeros((CFG.window_patches, acc.shape[1]), dtype=np.float32)
                y = np.zeros((CFG.window_patches, 3), dtype=np.float32)
                m = np.zeros(CFG.window_patches, dtype=bool)
                x[:n], y[:n], m[:n] = acc[start:end], labels[start:end], valid[start:end]
                pad = np.arange(CFG.window_patches) >= n
                self.windows.append((x, y, m, pad))

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, idx):
        x, y, m, pad = self.windows[idx]
        return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(m), torch.from_numpy(pad)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, pad_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))  # expect: MC525 statement
        attn = self.dropout(scores.softmax(dim=-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = MultiHeadSelfAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, pad_mask):
        x = self.norm1(x + self.attn(x, pad_mask))
        return self.norm2(x + self.ff(x))


class FOGModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Linear(CFG.patch_size * 3, CFG.d_model)
        self.pos_embed = nn.Parameter(torch.randn(1, CFG.window_patches, CFG.d_model) * 0.02)
        self.blocks = nn.ModuleList([EncoderBlock(CFG.d_model, CFG.n_heads) for _ in range(CFG.n_layers)])
        self.lstm = nn.LSTM(CFG.d_model, CFG.lstm_hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * CFG.lstm_hidden, len(CFG.targets))

    def forward(self, x, pad_mask):
        h = self.patch_embed(x) + self.pos_embed
        for block in self.blocks:
            h = block(h, pad_mask)
        lengths = (~pad_mask).sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
        h, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=h.size(1))
        return self.head(h)


def average_precision(y_true, y_score):
    order = np.argsort(-y_score)
    y_true = y_true[order]
    if y_true.sum() == 0:
        return float("nan")
    precision = np.cumsum(y_true) / np.arange(1, len(y_true) + 1)
    return float((precision * y_true).sum() / y_true.sum())


def train_one_epoch(model, loader, optimizer):
    model.train()
    total = 0.0
    for x, y, m, pad in loader:
        logits = model(x, pad)
        loss = F.binary_cross_entropy_with_logits(logits, y, reduction="none")
        weight = (m & ~pad).float().unsqueeze(-1)
        loss = (loss * weight).sum() / weight.sum().clamp(min=1.0) / 3
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def valid_one_epoch(model, loader):
    model.eval()
    scores, targets = [], []
    with torch.no_grad():
        for x, y, m, pad in loader:
            prob = torch.sigmoid(model(x, pad))
            keep = m & ~pad
            scores.append(prob[keep].numpy())
            targets.append(y[keep].numpy())
    scores, targets = np.concatenate(scores), np.concatenate(targets)
    aps = [average_precision(targets[:, i], scores[:, i]) for i in range(3)]
    return aps, float(np.nanmean(aps))


if __name__ == "__main__":
    torch.manual_seed(CFG.seed)
    rng = np.random.default_rng(CFG.seed)
    recordings = [simulate_recording(rng, int(rng.integers(40, 130))) for _ in range(24)]
    train_ds, valid_ds = FOGDataset(recordings[:18]), FOGDataset(recordings[18:])
    train_loader = torch.utils.data.DataLoader(train_ds, batch_size=CFG.batch_size, shuffle=True)
    valid_loader = torch.utils.data.DataLoader(valid_ds, batch_size=64)
    model = FOGModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr)
    for epoch in range(CFG.epochs):
        loss = train_one_epoch(model, train_loader, optimizer)
        aps, score = valid_one_epoch(model, valid_loader)
        print(f"epoch {epoch + 1}: loss {loss:.4f}  " + "  ".join(f"{n} AP {a:.3f}" for n, a in zip(CFG.targets, aps))
              + f"  mAP {score:.3f}")
