"""Aspect-based sentiment for hotel reviews: one polarity per aspect (cleanliness, staff, location, ...) from a review's tokens.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class Aspect(str, Enum):
    CLEANLINESS = "cleanliness"
    STAFF = "staff"
    LOCATION = "location"
    VALUE = "value"
    BREAKFAST = "breakfast"


class Polarity(int, Enum):
    NOT_MENTIONED = 0
    NEGATIVE = 1
    NEUTRAL = 2
    POSITIVE = 3


@dataclass
class AspectConfig:
    vocab: Dict[str, int] = field(default_factory=dict)
    pad_idx: int = 0
    unk_idx: int = 1
    d_model: int = 64
    n_head: int = 4
    n_layers: int = 2
    max_len: int = 80
    drop_prob: float = 0.1

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError("d_model must be divisible by n_head")
        if self.pad_idx == self.unk_idx:
            raise ValueError("pad and unk must differ")


def build_vocab(reviews: Sequence[str], min_count: int = 1) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for review in reviews:
        for word in review.lower().split():
            counts[word] = counts.get(word, 0) + 1
    vocab = {"<pad>": 0, "<unk>": 1}
    for word in sorted(w for w, c in counts.items() if c >= min_count):
        vocab[word] = len(vocab)
    return vocab


def make_src_mask(src: torch.Tensor, pad_idx: int) -> torch.Tensor:
    """Padding mask for the review tokens, broadcastable to the attention scores."""
    return (src != pad_idx).unsqueeze(1).unsqueeze(3)  # expect: MC514 padmask


class ScaleDotProductAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        score = q @ k.transpose(2, 3) / math.sqrt(k.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000.0)
        return F.softmax(score, dim=-1) @ v


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.w_concat = nn.Linear(d_model, d_model)
        self.attention = ScaleDotProductAttention()

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.view(b, n, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        out = self.attention(self.split(self.w_q(x)), self.split(self.w_k(x)), self.split(self.w_v(x)), mask)
        b, h, n, dh = out.shape
        return self.w_concat(out.transpose(1, 2).reshape(b, n, h * dh))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: AspectConfig) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(cfg.d_model, cfg.n_head)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.ReLU(), nn.Dropout(cfg.drop_prob),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.dropout = nn.Dropout(cfg.drop_prob)

    def forward(self, x: torch.Tensor, src_mask: Optional[torch.Tensor]) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, src_mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class AspectSentimentModel(nn.Module):
    """Encoder plus one learned query per aspect that pools the review."""

    def __init__(self, cfg: AspectConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.emb = nn.Embedding(max(len(cfg.vocab), 2), cfg.d_model, padding_idx=cfg.pad_idx)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.aspect_queries = nn.Parameter(torch.randn(len(Aspect), cfg.d_model) * 0.02)
        self.classifier = nn.Linear(cfg.d_model, len(Polarity))

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        if src.size(1) > self.cfg.max_len:
            raise ValueError("review longer than max_len")
        src_mask = make_src_mask(src, self.cfg.pad_idx)
        x = self.emb(src) + self.pos(torch.arange(src.size(1), device=src.device))
        for layer in self.layers:
            x = layer(x, src_mask)
        keep = src != self.cfg.pad_idx
        scores = torch.einsum("ad,bnd->ban", self.aspect_queries, x) / math.sqrt(self.cfg.d_model)
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        pooled = torch.einsum("ban,bnd->bad", scores.softmax(-1), x)
        return self.classifier(pooled)


def encode_reviews(reviews: Sequence[str], cfg: AspectConfig) -> torch.Tensor:
    rows = [[cfg.vocab.get(w, cfg.unk_idx) for w in r.lower().split()][: cfg.max_len] for r in reviews]
    width = max(len(r) for r in rows)
    return torch.tensor([r + [cfg.pad_idx] * (width - len(r)) for r in rows])


def predict_aspects(model: AspectSentimentModel, reviews: Sequence[str]) -> List[Dict[str, str]]:
    model.eval()
    with torch.no_grad():
        pred = model(encode_reviews(reviews, model.cfg)).argmax(-1)
    return [{a.value: Polarity(int(p)).name for a, p in zip(Aspect, row)} for row in pred]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    reviews = ["the room was spotless and the staff were lovely",
               "terrible breakfast",
               "great location near the station but overpriced for what you get"]
    cfg = AspectConfig(vocab=build_vocab(reviews))
    model = AspectSentimentModel(cfg)
    labels = torch.randint(0, len(Polarity), (len(reviews), len(Aspect)))
    logits = model(encode_reviews(reviews, cfg))
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    loss.backward()
    logger.info("loss %.4f", loss.item())
    print(predict_aspects(model, reviews)[1])
