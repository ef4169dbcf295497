"""Held-out 13: a keyword-spotting model for embedded devices that runs its attention pooling in
float16 and keeps its magic numbers in an `Enum` (a habit of the project's C++-minded authors).

Source: NVIDIA/apex#1052 ("RuntimeError: value cannot be converted to type at::Half without
overflow: -1e+09"): `masked_fill(mask, -1e9)` on half-precision scores. Here the -1e9 is a member
of a float Enum, `MaskValue.PAD`, used as the fill of the fp16 frame scores.
Surroundings: an Enum (float mixin) constant as the fill value, a model converted with `.half()`.
"""

from enum import Enum

import torch
from torch import nn


class MaskValue(float, Enum):
    KEEP = 0.0
    PAD = -1e9  # expect: MC501 enum


class AttentivePooling(nn.Module):
    """Pools variable-length frame features into one vector per clip."""

    def __init__(self, dim: int):
        super().__init__()
        self.score = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def forward(self, frames: torch.Tensor, n_frames: torch.Tensor) -> torch.Tensor:
        t = frames.shape[1]
        pad = torch.arange(t, device=frames.device)[None, :] >= n_frames[:, None]
        scores = self.score(frames).squeeze(-1)
        scores = scores.masked_fill(pad, MaskValue.PAD)  # also: MC501
        weights = scores.softmax(dim=-1)
        return torch.einsum("bt,btd->bd", weights, frames)


class KeywordSpotter(nn.Module):
    def __init__(self, n_mels: int = 40, dim: int = 64, n_keywords: int = 12):
        super().__init__()
        self.frontend = nn.Sequential(nn.Linear(n_mels, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.pool = AttentivePooling(dim)
        self.head = nn.Linear(dim, n_keywords)

    def forward(self, mels: torch.Tensor, n_frames: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.frontend(mels), n_frames))


def export_for_device(model: KeywordSpotter) -> KeywordSpotter:
    """The device runtime only has fp16 kernels."""
    return model.half().eval()
