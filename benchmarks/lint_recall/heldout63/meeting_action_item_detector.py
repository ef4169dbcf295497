"""Streaming action-item detector for meeting transcripts: each utterance is tagged using only what was said before it.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask); pytorch/pytorch#103749 (conventions.md §3 item 5); conventions.md §2.3.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class UtteranceLabel(Enum):
    NONE = 0
    ACTION_ITEM = auto()
    DECISION = auto()
    QUESTION = auto()


@dataclass(frozen=True)
class DetectorConfig:
    feature_dim: int = 40
    num_speakers: int = 8
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_utterances: int = 64
    dropout: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def validate(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        if self.num_speakers < 1:
            raise ValueError("need at least one speaker slot")


def build_causal_mask(num_utterances: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """Additive (num_utterances, num_utterances) mask for streaming attention."""
    if num_utterances <= 0:
        raise ValueError("num_utterances must be positive")
    full = torch.full((num_utterances, num_utterances), float("-inf"), device=device)
    return torch.triu(full, diagonal=0)  # expect: MC503 diagonal


def make_padding_bias(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Additive (batch, 1, 1, max_len) bias that hides the padded utterances as keys."""
    positions = torch.arange(max_len, device=lengths.device)
    padded = positions[None, :] >= lengths[:, None]
    bias = torch.zeros(padded.shape, device=lengths.device).masked_fill(padded, float("-inf"))
    return bias[:, None, None, :]


class StreamingSelfAttention(nn.Module):
    def __init__(self, cfg: DetectorConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, causal: torch.Tensor,
                padding_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.cfg.num_heads, self.cfg.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.cfg.head_dim)
        scores = scores + causal
        if padding_bias is not None:
            scores = scores + padding_bias
        weights = self.dropout(F.softmax(scores, dim=-1))
        ctx = (weights @ v).transpose(1, 2).reshape(b, n, self.cfg.d_model)
        return self.out(ctx)


class DetectorLayer(nn.Module):
    def __init__(self, cfg: DetectorConfig) -> None:
        super().__init__()
        self.attn = StreamingSelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.ReLU(), nn.Linear(2 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, causal: torch.Tensor, padding_bias: Optional[torch.Tensor]) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), causal, padding_bias)
        return x + self.mlp(self.ln2(x))


class ActionItemDetector(nn.Module):
    def __init__(self, cfg: DetectorConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.proj = nn.Linear(cfg.feature_dim, cfg.d_model)
        self.speaker = nn.Embedding(cfg.num_speakers, cfg.d_model)
        self.layers = nn.ModuleList(DetectorLayer(cfg) for _ in range(cfg.num_layers))
        self.classifier = nn.Linear(cfg.d_model, len(UtteranceLabel))

    def forward(self, features: torch.Tensor, speakers: torch.Tensor,
                lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        if features.shape[:2] != speakers.shape:
            raise ValueError("features and speakers disagree on (batch, utterances)")
        n = features.size(1)
        if n > self.cfg.max_utterances:
            raise ValueError(f"{n} utterances exceed max_utterances={self.cfg.max_utterances}")
        causal = build_causal_mask(n, device=features.device)
        padding_bias = make_padding_bias(lengths, n) if lengths is not None else None
        x = self.proj(features) + self.speaker(speakers)
        for layer in self.layers:
            x = layer(x, causal, padding_bias)
        return self.classifier(x)


def collate_meetings(meetings: Sequence[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Right-pad utterance features, speaker ids and labels of several meetings."""
    if not meetings:
        raise ValueError("empty batch")
    lengths = torch.tensor([m["features"].size(0) for m in meetings])
    n, dim = int(lengths.max()), meetings[0]["features"].size(1)
    features = torch.zeros(len(meetings), n, dim)
    speakers = torch.zeros(len(meetings), n, dtype=torch.long)
    labels = torch.full((len(meetings), n), -100, dtype=torch.long)
    for i, m in enumerate(meetings):
        t = m["features"].size(0)
        features[i, :t], speakers[i, :t], labels[i, :t] = m["features"], m["speakers"], m["labels"]
    return {"features": features, "speakers": speakers, "labels": labels, "lengths": lengths}


def synthetic_meeting(num_utterances: int, cfg: DetectorConfig, generator: torch.Generator) -> Dict[str, torch.Tensor]:
    return {
        "features": torch.randn(num_utterances, cfg.feature_dim, generator=generator),
        "speakers": torch.randint(0, cfg.num_speakers, (num_utterances,), generator=generator),
        "labels": torch.randint(0, len(UtteranceLabel), (num_utterances,), generator=generator),
    }


def detect_action_items(model: ActionItemDetector, batch: Dict[str, torch.Tensor]) -> List[List[int]]:
    """Indices of the utterances tagged as action items, per meeting."""
    model.eval()
    with torch.no_grad():
        logits = model(batch["features"], batch["speakers"], batch["lengths"])
    preds = logits.argmax(dim=-1)
    found: List[List[int]] = []
    for i, length in enumerate(batch["lengths"].tolist()):
        row = preds[i, :length]
        found.append((row == UtteranceLabel.ACTION_ITEM.value).nonzero().flatten().tolist())
    return found


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    cfg = DetectorConfig()
    gen = torch.Generator().manual_seed(0)
    model = ActionItemDetector(cfg)
    batch = collate_meetings([synthetic_meeting(n, cfg, gen) for n in (12, 7, 9)])
    logits = model(batch["features"], batch["speakers"], batch["lengths"])
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    loss.backward()
    logger.info("loss %.4f", loss.item())
    print(detect_action_items(model, batch))
