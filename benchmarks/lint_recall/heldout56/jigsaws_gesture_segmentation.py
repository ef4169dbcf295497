"""Surgical gesture segmentation from robot kinematics, in the JIGSAWS suturing setting.

Each trial is a sequence of da Vinci kinematic frames (tool-tip positions, velocities and gripper
angles of both arms); the model labels every frame with a gesture (G1 reaching for the needle ...
G11 dropping the suture). Attention is local: a frame sees the frames within a window around it,
and trials of different lengths are padded. Frame-wise accuracy and edit score are reported;
segmentation of recorded trials runs under bfloat16 autocast.

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19), §2.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

GESTURES = ["G1", "G2", "G3", "G4", "G5", "G6", "G8", "G9", "G10", "G11"]


@dataclass(slots=True, frozen=True)
class SegmenterConfig:
    kin_dim: int = 14
    dim: int = 64
    heads: int = 4
    layers: int = 3
    window: int = 8


def local_window(t: int, window: int, device: torch.device) -> Bool[Tensor, "t t"]:
    idx = torch.arange(t, device=device)
    return (idx[:, None] - idx[None, :]).abs() <= window


def windowed_scores(q: Tensor, k: Tensor, keep: Bool[Tensor, "b t"], *, window: int) -> Float[Tensor, "b h t t"]:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = local_window(q.shape[-2], window, q.device) & keep[:, None, None, :]
    return scores.masked_fill(~allowed, torch.finfo(torch.float32).min)  # expect: MC517 function


class LocalAttentionLayer(nn.Module):
    def __init__(self, cfg: SegmenterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(), nn.Linear(2 * cfg.dim, cfg.dim))

    def forward(self, x: Float[Tensor, "b t d"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b t d"]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        weights = windowed_scores(q, k, keep, window=self.cfg.window).softmax(dim=-1)
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


class GestureSegmenter(nn.Module):
    def __init__(self, cfg: SegmenterConfig) -> None:
        super().__init__()
        self.inp = nn.Conv1d(cfg.kin_dim, cfg.dim, kernel_size=5, padding=2)
        self.layers = nn.ModuleList(LocalAttentionLayer(cfg) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.dim, len(GESTURES))

    def forward(self, kin: Float[Tensor, "b t k"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b t g"]:
        x = self.inp(kin.transpose(1, 2)).transpose(1, 2)
        for layer in self.layers:
            x = layer(x, keep)
        return self.out(x)


def synth_trial(gen: torch.Generator, cfg: SegmenterConfig) -> tuple[Tensor, Tensor]:
    order = [0, 1, 2, 3] + [int(g) for g in torch.randint(1, len(GESTURES) - 1, (4,), generator=gen)] + [len(GESTURES) - 1]
    labels = torch.cat([torch.full((int(torch.randint(10, 30, (1,), generator=gen)),), g) for g in order])
    proto = torch.randn(len(GESTURES), cfg.kin_dim, generator=torch.Generator().manual_seed(5))
    phase = torch.sin(torch.arange(len(labels)) / 3.0)[:, None]
    kin = proto[labels] + 0.5 * phase + 0.8 * torch.randn(len(labels), cfg.kin_dim, generator=gen)
    return kin, labels


def pad_trials(trials: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Int[Tensor, "b t"], Bool[Tensor, "b t"]]:
    t = max(len(y) for _, y in trials)
    kin = torch.zeros(len(trials), t, trials[0][0].shape[1])
    labels = torch.full((len(trials), t), -100)
    for i, (x, y) in enumerate(trials):
        kin[i, : len(y)], labels[i, : len(y)] = x, y
    return kin, labels, labels != -100


def edit_score(pred: list[int], truth: list[int]) -> float:
    segs = lambda seq: [g for i, g in enumerate(seq) if i == 0 or seq[i - 1] != g]
    a, b = segs(pred), segs(truth)
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return 100 * (1 - d[-1][-1] / max(len(a), len(b)))


@torch.no_grad()
def segment(model: GestureSegmenter, kin: Tensor, keep: Tensor) -> Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model(kin, keep).argmax(-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = SegmenterConfig()
    model = GestureSegmenter(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(150):
        kin, labels, keep = pad_trials([synth_trial(gen, cfg) for _ in range(16)])
        loss = F.cross_entropy(model(kin, keep).flatten(0, 1), labels.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    kin, labels, keep = pad_trials([synth_trial(torch.Generator().manual_seed(s), cfg) for s in range(100, 140)])
    pred = segment(model, kin, keep)
    acc = (pred[keep] == labels[keep]).float().mean().item()
    edit = sum(edit_score(pred[i][keep[i]].tolist(), labels[i][keep[i]].tolist()) for i in range(len(pred))) / len(pred)
    print(f"loss {loss.item():.3f} frame accuracy {acc:.3f} edit {edit:.1f}")
