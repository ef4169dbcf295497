"""Glitch classification for LIGO detector characterisation, in the setting of Gravity Spy.

A transient in the whitened strain is turned into a time-frequency map (short-time Fourier
magnitudes in log-spaced bands); each time column is a token. Glitches last from 0.25 s to 2 s,
so the token sequences are padded to the longest of the batch. Classes follow Gravity Spy's
taxonomy (a subset): Blip, Koi_Fish, Whistle, Scattered_Light, Tomte and None_of_the_Above.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20), §1 (direction cheat-sheet), §5 item 5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn

SAMPLE_RATE = 1024
HOP = 32


class Glitch(Enum):
    BLIP = 0
    KOI_FISH = 1
    WHISTLE = 2
    SCATTERED_LIGHT = 3
    TOMTE = 4
    NONE_OF_THE_ABOVE = 5


@dataclass(slots=True, frozen=True)
class SpyConfig:
    bands: int = 24
    dim: int = 64
    heads: int = 4
    layers: int = 2


def synth_glitch(kind: Glitch, seconds: float, gen: torch.Generator) -> Float[Tensor, "n"]:
    t = torch.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    centre = seconds / 2
    noise = torch.randn(t.shape, generator=gen)
    match kind:
        case Glitch.BLIP:
            burst = torch.exp(-((t - centre) / 0.01) ** 2) * torch.sin(2 * math.pi * 150 * t)
        case Glitch.KOI_FISH:
            burst = 3 * torch.exp(-((t - centre) / 0.04) ** 2) * torch.sin(2 * math.pi * 60 * t)
        case Glitch.WHISTLE:
            burst = torch.sin(2 * math.pi * (200 + 150 * t / seconds) * t) * (t > centre - 0.2) * (t < centre + 0.2)
        case Glitch.SCATTERED_LIGHT:
            burst = 2 * torch.sin(2 * math.pi * 20 * torch.sin(2 * math.pi * 0.8 * t) * t)
        case Glitch.TOMTE:
            burst = 2 * torch.exp(-((t - centre) / 0.03) ** 2) * torch.sin(2 * math.pi * 40 * t)
        case Glitch.NONE_OF_THE_ABOVE:
            burst = torch.zeros_like(t)
    return 4 * burst + noise


def time_frequency(strain: Float[Tensor, "n"], bands: int) -> Float[Tensor, "t f"]:
    spec = torch.stft(strain, n_fft=128, hop_length=HOP, window=torch.hann_window(128), return_complex=True).abs()
    edges = torch.logspace(math.log10(2), math.log10(spec.shape[0] - 1), bands + 1).long()
    return torch.stack([spec[a : max(b, a + 1)].mean(0) for a, b in zip(edges[:-1], edges[1:])], dim=-1).log1p()


class ColumnAttention(nn.Module):
    def __init__(self, cfg: SpyConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    @staticmethod
    def masked_softmax(scores: Float[Tensor, "b h t t"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b h t t"]:
        scores = scores.masked_fill(~keep[:, None, None, :], torch.finfo(scores.dtype).min)
        return scores.softmax(dim=-1)

    def forward(self, x: Float[Tensor, "b t d"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b t d"]:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        weights = self.masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), keep)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))


class GlitchClassifier(nn.Module):
    def __init__(self, cfg: SpyConfig) -> None:
        super().__init__()
        self.inp = nn.Linear(cfg.bands, cfg.dim)
        self.pos = nn.Embedding(128, cfg.dim)
        self.attn = nn.ModuleList(ColumnAttention(cfg) for _ in range(cfg.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.dim) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.dim, len(Glitch))

    def forward(self, tf: Float[Tensor, "b t f"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b c"]:
        x = self.inp(tf) + self.pos(torch.arange(tf.shape[1]))
        for attn, norm in zip(self.attn, self.norms):
            x = x + attn(norm(x), keep)
        w = keep[..., None].to(x.dtype)
        return self.out((x * w).sum(1) / w.sum(1))


def make_batch(n: int, cfg: SpyConfig, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    labels = torch.randint(len(Glitch), (n,), generator=gen)
    maps = [time_frequency(synth_glitch(Glitch(int(c)), 0.25 + 1.75 * float(torch.rand(1, generator=gen)), gen), cfg.bands) for c in labels]
    t = max(m.shape[0] for m in maps)
    tf = torch.zeros(n, t, cfg.bands)
    keep = torch.zeros(n, t, dtype=torch.bool)
    for i, m in enumerate(maps):
        tf[i, : m.shape[0]], keep[i, : m.shape[0]] = m, True
    return tf, keep, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = SpyConfig()
    model = GlitchClassifier(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(120):
        tf, keep, labels = make_batch(32, cfg, gen)
        loss = F.cross_entropy(model(tf, keep), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    tf, keep, labels = make_batch(300, cfg, torch.Generator().manual_seed(1))
    with torch.no_grad():
        print(f"loss {loss.item():.3f} accuracy {(model(tf, keep).argmax(-1) == labels).float().mean().item():.3f}")
