"""Passive-sonar vessel classification on DeepShip-style LOFAR spectrograms.

A frame-level transformer encoder reads ship-radiated noise recordings of
different lengths (cargo, passenger, tanker, tug) and pools the real frames
into one class prediction. A float16 copy is exported for the towed-array
edge processor.

Source: NVIDIA/apex#1052 (also NVIDIA/apex#1105, facebookresearch/fairseq#3575)
"""

import argparse
import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CLASSES = ("cargo", "passenger", "tanker", "tug")
SAMPLE_RATE = 4000


@dataclass
class SonarConfig:
    n_fft: int = 126
    hop: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    dropout: float = 0.1
    mask_value: float = -1e4
    n_classes: int = len(CLASSES)

    @property
    def n_bins(self):
        return self.n_fft // 2 + 1


def lofar(waveform, cfg):
    window = torch.hann_window(cfg.n_fft)
    spec = torch.stft(waveform, cfg.n_fft, cfg.hop, window=window, return_complex=True)
    power = spec.abs().pow(2).clamp_min(1e-10).log10()
    power = power - power.median(dim=-1, keepdim=True).values
    return power.transpose(0, 1)


class SyntheticDeepShip(Dataset):
    def __init__(self, n_records, cfg, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n_records):
            label = int(torch.randint(len(CLASSES), (1,), generator=g))
            seconds = 0.6 + 1.4 * torch.rand(1, generator=g).item()
            t = torch.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
            shaft = 120.0 + 180.0 * label + 20.0 * torch.rand(1, generator=g).item()
            tonal = sum(torch.sin(2 * math.pi * shaft * h * t) / h for h in (1, 2, 3))
            noise = 0.8 * torch.randn(t.shape, generator=g)
            self.items.append((lofar(tonal + noise, cfg), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate_recordings(batch):
    frames = [f for f, _ in batch]
    lengths = torch.tensor([f.shape[0] for f in frames])
    feats = nn.utils.rnn.pad_sequence(frames, batch_first=True)
    frame_keep = torch.arange(feats.shape[1])[None, :] < lengths[:, None]
    labels = torch.tensor([y for _, y in batch])
    return feats, frame_keep, labels


class FrameAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.mask_value = cfg.mask_value

    def forward(self, x, frame_keep):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~frame_keep[:, None, None, :], self.mask_value)
        attn = self.drop(scores.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, t, -1)
        return self.proj(out)


class EncoderBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = FrameAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model)
        )

    def forward(self, x, frame_keep):
        x = x + self.attn(self.norm1(x), frame_keep)
        return x + self.ff(self.norm2(x))


class SonarTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Linear(cfg.n_bins, cfg.d_model)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def forward(self, feats, frame_keep):
        x = self.embed(feats)
        for block in self.blocks:
            x = block(x, frame_keep)
        x = self.norm(x)
        keep = frame_keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1)
        return self.head(pooled)


@torch.no_grad()
def evaluate(model, loader, dtype=torch.float32):
    model.eval()
    correct = total = 0
    for feats, frame_keep, labels in loader:
        logits = model(feats.to(dtype), frame_keep)
        correct += (logits.argmax(-1) == labels).sum().item()
        total += labels.numel()
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    cfg = SonarConfig()
    train_loader = DataLoader(SyntheticDeepShip(160, cfg, seed=1), batch_size=16, shuffle=True, collate_fn=collate_recordings)
    test_loader = DataLoader(SyntheticDeepShip(48, cfg, seed=2), batch_size=16, collate_fn=collate_recordings)
    model = SonarTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        for feats, frame_keep, labels in train_loader:
            loss = F.cross_entropy(model(feats, frame_keep), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f} test acc {evaluate(model, test_loader):.3f}")
    if args.fp16:
        edge_model = copy.deepcopy(model).half()
        print(f"float16 edge copy acc {evaluate(edge_model, test_loader, torch.float16):.3f}")


if __name__ == "__main__":
    main()
