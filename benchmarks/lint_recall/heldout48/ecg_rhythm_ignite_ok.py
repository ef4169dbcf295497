"""Rhythm classification of Holter ECG strips (normal sinus, atrial fibrillation, ventricular ectopy).

Each strip is cut into beats around the R peaks; a 1-D conv encodes each beat, the RR interval is
embedded, and two self-attention layers over the beats of the strip feed a masked mean. Trained
with pytorch-ignite's supervised trainer and evaluator, checkpointing on validation accuracy.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md section 3 items 5 and 22), section 2.3.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from ignite.contrib.handlers import ProgressBar
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import ModelCheckpoint, TerminateOnNan
from ignite.metrics import Accuracy, Loss
from torch.utils.data import DataLoader, Dataset

BEAT_LEN = 64
RHYTHMS = ["sinus", "afib", "ectopy"]


def synth_strip(rng, label):
    n = rng.integers(6, 24)
    rr = np.full(n, 0.8) + rng.normal(0, 0.02, n)
    if label == 1:
        rr = rng.uniform(0.45, 1.1, n)
    t = np.linspace(-1, 1, BEAT_LEN)
    beats = np.stack([np.exp(-(t / 0.05) ** 2) - 0.2 * np.exp(-((t - 0.4) / 0.1) ** 2) for _ in range(n)])
    if label == 2:
        for i in rng.choice(n, size=max(1, n // 4), replace=False):
            beats[i] = 0.8 * np.exp(-(t / 0.18) ** 2) - 0.4 * np.exp(-((t - 0.5) / 0.15) ** 2)
            rr[i] *= 0.7
    beats += rng.normal(0, 0.05, beats.shape)
    return beats.astype(np.float32), rr.astype(np.float32)


class HolterDataset(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, len(RHYTHMS), n)
        self.strips = [synth_strip(rng, y) for y in self.labels]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        beats, rr = self.strips[i]
        return torch.from_numpy(beats), torch.from_numpy(rr), int(self.labels[i])


def collate_strips(batch):
    n_max = max(b[0].shape[0] for b in batch)
    beats = torch.zeros(len(batch), n_max, BEAT_LEN)
    rr = torch.zeros(len(batch), n_max)
    beat_mask = torch.zeros(len(batch), n_max, dtype=torch.bool)
    for i, (b, r, _) in enumerate(batch):
        beats[i, : len(b)] = b
        rr[i, : len(r)] = r
        beat_mask[i, : len(b)] = True
    pair_mask = beat_mask[:, :, None] & beat_mask[:, None, :]
    labels = torch.tensor([b[2] for b in batch])
    return {"beats": beats, "rr": rr, "beat_mask": beat_mask, "pair_mask": pair_mask}, labels


def masked_attention(q, k, v, pair_mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~pair_mask[:, None], torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) @ v


class RhythmLayer(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Dropout(dropout), nn.Linear(2 * d_model, d_model))

    def forward(self, x, pair_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        ctx = masked_attention(q, k, v, pair_mask).transpose(1, 2).reshape(b, n, d)
        x = x + self.out(ctx)
        return x + self.ffn(self.norm2(x))


class HolterNet(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2, n_classes=len(RHYTHMS)):
        super().__init__()
        self.beat_encoder = nn.Sequential(
            nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, d_model),
        )
        self.rr_embed = nn.Linear(2, d_model)
        self.layers = nn.ModuleList([RhythmLayer(d_model, n_heads) for _ in range(n_layers)])
        self.classifier = nn.Linear(d_model, n_classes)

    def forward(self, beats, rr, beat_mask, pair_mask):
        b, n, _ = beats.shape
        x = self.beat_encoder(beats.reshape(b * n, 1, BEAT_LEN)).view(b, n, -1)
        rr_prev = torch.cat([rr[:, :1], rr[:, :-1]], dim=1)
        x = x + self.rr_embed(torch.stack([rr, rr - rr_prev], dim=-1))
        for layer in self.layers:
            x = layer(x, pair_mask)
        keep = beat_mask.unsqueeze(-1).float()
        return self.classifier((x * keep).sum(1) / keep.sum(1))


def prepare_batch(batch, device=None, non_blocking=False):
    inputs, labels = batch
    inputs = {k: v.to(device, non_blocking=non_blocking) for k, v in inputs.items()}
    return (inputs["beats"], inputs["rr"], inputs["beat_mask"], inputs["pair_mask"]), labels.to(device)


def run(epochs=10, batch_size=32, lr=1e-3, device="cpu"):
    train_loader = DataLoader(HolterDataset(1200, seed=0), batch_size, shuffle=True, collate_fn=collate_strips)
    val_loader = DataLoader(HolterDataset(300, seed=1), batch_size, collate_fn=collate_strips)
    model = HolterNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    model_fn = lambda m, x: m(*x)
    trainer = create_supervised_trainer(model, optimizer, criterion, device=device, prepare_batch=prepare_batch, model_fn=model_fn)
    evaluator = create_supervised_evaluator(
        model, metrics={"accuracy": Accuracy(), "nll": Loss(criterion)}, device=device, prepare_batch=prepare_batch, model_fn=model_fn
    )
    trainer.add_event_handler(Events.ITERATION_COMPLETED, TerminateOnNan())
    ProgressBar().attach(trainer, output_transform=lambda loss: {"loss": loss})

    @trainer.on(Events.EPOCH_COMPLETED)
    def log_validation(engine):
        evaluator.run(val_loader)
        metrics = evaluator.state.metrics
        print(f"epoch {engine.state.epoch}: val acc {metrics['accuracy']:.3f} nll {metrics['nll']:.3f}")

    checkpoint = ModelCheckpoint("checkpoints", "holter", n_saved=2, require_empty=False,
                                 score_function=lambda e: e.state.metrics["accuracy"], score_name="accuracy")
    evaluator.add_event_handler(Events.COMPLETED, checkpoint, {"model": model})
    trainer.run(train_loader, max_epochs=epochs)
    return model


if __name__ == "__main__":
    run()
