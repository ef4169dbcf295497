"""BirdCLEF 2024: bird call species from variable-length soundscape crops, log-mel frames into a transformer encoder.

Source: conventions.md §1 (direction cheat-sheet), §5 item 1; seed self_attention_mask_guide.txt §2.
"""
import os
import gc
import glob
import math
import time
import random

import numpy as np


class CFG:
    seed = 7
    root = "/kaggle/input/birdclef-2024"
    sample_rate = 16000
    max_seconds = 5
    n_fft = 512
    hop_length = 256
    n_mels = 64
    fmin = 50
    fmax = 8000
    d_model = 128
    n_heads = 4
    n_layers = 2
    dropout = 0.1
    num_classes = 24
    batch_size = 8
    epochs = 2
    lr = 1e-3
    mixup_alpha = 0.4
    n_synthetic = 96


random.seed(CFG.seed)
np.random.seed(CFG.seed)

MAX_SAMPLES = CFG.sample_rate * CFG.max_seconds
MAX_FRAMES = MAX_SAMPLES // CFG.hop_length + 1


def synth_clip(label):
    seconds = random.uniform(1.0, CFG.max_seconds)
    t = np.arange(int(seconds * CFG.sample_rate)) / CFG.sample_rate
    f0 = 600 + 250 * label
    chirp = np.sin(2 * np.pi * (f0 + 300 * np.sin(2 * np.pi * 3 * t)) * t)
    env = (np.sin(2 * np.pi * random.uniform(1, 4) * t) > 0).astype(np.float32)
    return (0.5 * chirp * env + 0.05 * np.random.randn(len(t))).astype(np.float32)


audio_files = sorted(glob.glob(os.path.join(CFG.root, "train_audio", "*", "*.ogg")))
if audio_files:
    import soundfile as sf
    species = sorted({os.path.basename(os.path.dirname(p)) for p in audio_files})[: CFG.num_classes]
    items = [(p, species.index(os.path.basename(os.path.dirname(p)))) for p in audio_files
             if os.path.basename(os.path.dirname(p)) in species]
    load_wave = lambda p: sf.read(p, dtype="float32")[0][:MAX_SAMPLES]
else:
    species = [f"bird{i:02d}" for i in range(CFG.num_classes)]
    items = [(synth_clip(i % CFG.num_classes), i % CFG.num_classes) for i in range(CFG.n_synthetic)]
    load_wave = lambda w: w
print(f"{len(items)} clips, {len(species)} species")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(CFG.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def mel_filterbank(sr, n_fft, n_mels, fmin, fmax):
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    mel_to_hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    mels = np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    bins = np.floor((n_fft + 1) * mel_to_hz(mels) / sr).astype(int)
    fb = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for m in range(1, n_mels + 1):
        l, c, r = bins[m - 1], bins[m], bins[m + 1]
        for k in range(l, c):
            fb[m - 1, k] = (k - l) / max(1, c - l)
        for k in range(c, r):
            fb[m - 1, k] = (r - k) / max(1, r - c)
    return torch.from_numpy(fb)


MEL_FB = mel_filterbank(CFG.sample_rate, CFG.n_fft, CFG.n_mels, CFG.fmin, CFG.fmax)
WINDOW = torch.hann_window(CFG.n_fft)


def log_mel(wave):
    spec = torch.stft(wave, CFG.n_fft, CFG.hop_length, window=WINDOW, return_complex=True).abs() ** 2
    mel = MEL_FB @ spec
    return torch.log(mel + 1e-6).T


class BirdDataset(Dataset):
    def __init__(self, items, train=True):
        self.items = items
        self.train = train

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        src, label = self.items[i]
        wave = torch.from_numpy(np.ascontiguousarray(load_wave(src)))
        if self.train:
            wave = wave * random.uniform(0.6, 1.4)
        feats = log_mel(wave)
        feats = (feats - feats.mean()) / (feats.std() + 1e-5)
        return feats, label


def collate_frames(batch):
    lengths = torch.tensor([f.shape[0] for f, _ in batch])
    feats = nn.utils.rnn.pad_sequence([f for f, _ in batch], batch_first=True)
    labels = torch.tensor([l for _, l in batch])
    key_padding_mask = torch.arange(feats.shape[1])[None, :] >= lengths[:, None]
    return feats, key_padding_mask, labels


class FrameAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x, key_padding_mask):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=~key_padding_mask[:, None, None, :],
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = FrameAttention(d_model, n_heads, dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(4 * d_model, d_model))

    def forward(self, x, key_padding_mask):
        x = x + self.attn(self.norm1(x), key_padding_mask)
        return x + self.ff(self.norm2(x))


class BirdSED(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(CFG.n_mels, CFG.d_model), nn.GELU(), nn.Dropout(CFG.dropout))
        self.pos = nn.Parameter(torch.zeros(1, MAX_FRAMES + 1, CFG.d_model))
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.layers = nn.ModuleList([EncoderLayer(CFG.d_model, CFG.n_heads, CFG.dropout) for _ in range(CFG.n_layers)])
        self.norm = nn.LayerNorm(CFG.d_model)
        self.att = nn.Linear(CFG.d_model, CFG.num_classes)
        self.cla = nn.Linear(CFG.d_model, CFG.num_classes)

    def forward(self, feats, key_padding_mask):
        x = self.stem(feats) + self.pos[:, : feats.shape[1]]
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        x = self.norm(x)
        att = self.att(x).masked_fill(key_padding_mask[..., None], float("-inf"))
        norm_att = torch.softmax(att, dim=1)
        cla = self.cla(x)
        clipwise = (norm_att * cla).sum(dim=1)
        framewise = torch.sigmoid(cla)
        return clipwise, framewise


def mixup(feats, mask, targets, alpha):
    lam = np.random.beta(alpha, alpha)
    idx = torch.randperm(feats.size(0))
    return lam * feats + (1 - lam) * feats[idx], mask & mask[idx], lam * targets + (1 - lam) * targets[idx]


def padded_cmap(targets, preds, padding_factor=5):
    targets = np.concatenate([targets, np.ones((padding_factor, targets.shape[1]))])
    preds = np.concatenate([preds, np.ones((padding_factor, preds.shape[1]))])
    aps = []
    for c in range(targets.shape[1]):
        order = np.argsort(-preds[:, c])
        t = targets[order, c]
        hits = np.cumsum(t)
        aps.append(float((hits / np.arange(1, len(t) + 1) * t).sum() / max(1.0, t.sum())))
    return float(np.mean(aps))


random.shuffle(items)
n_val = max(CFG.batch_size, len(items) // 5)
train_loader = DataLoader(BirdDataset(items[n_val:]), batch_size=CFG.batch_size, shuffle=True,
                          collate_fn=collate_frames, drop_last=True)
valid_loader = DataLoader(BirdDataset(items[:n_val], train=False), batch_size=CFG.batch_size,
                          collate_fn=collate_frames)

if __name__ == "__main__":
    model = BirdSED().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr, weight_decay=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=CFG.epochs * len(train_loader))
    for epoch in range(CFG.epochs):
        t0 = time.time()
        model.train()
        for feats, kpm, labels in train_loader:
            feats, kpm = feats.to(device), kpm.to(device)
            targets = F.one_hot(labels, CFG.num_classes).float().to(device)
            feats, kpm, targets = mixup(feats, kpm, targets, CFG.mixup_alpha)
            clipwise, _ = model(feats, kpm)
            loss = F.binary_cross_entropy_with_logits(clipwise, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
        model.eval()
        all_t, all_p = [], []
        with torch.no_grad():
            for feats, kpm, labels in valid_loader:
                clipwise, _ = model(feats.to(device), kpm.to(device))
                all_p.append(torch.sigmoid(clipwise).cpu().numpy())
                all_t.append(F.one_hot(labels, CFG.num_classes).numpy())
        score = padded_cmap(np.concatenate(all_t), np.concatenate(all_p))
        print(f"epoch {epoch} loss {loss.item():.4f} padded cmAP {score:.4f} ({time.time() - t0:.0f}s)")
    torch.save(model.state_dict(), "birdclef_sed.pt")
    gc.collect()
