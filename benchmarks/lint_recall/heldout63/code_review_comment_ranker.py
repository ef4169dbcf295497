"""Code-review comment ranker: orders the candidate review comments of a pull request so that the most useful ones are shown first.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md §2.3.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class CommentKind(Enum):
    BUG = 0
    STYLE = 1
    NIT = 2
    QUESTION = 3
    PRAISE = 4


@dataclass
class RankerConfig:
    text_dim: int = 48
    d_model: int = 64
    n_heads: int = 4
    max_comments: int = 16
    num_files: int = 32
    cross_file_attention: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        if self.max_comments < 1:
            raise ValueError("max_comments must be positive")


def build_slot_bias(max_comments: int) -> torch.Tensor:
    """Zero (max_comments, max_comments) bias shared by every pull request."""
    return torch.zeros(max_comments, max_comments)


def make_cross_file_mask(file_ids: torch.Tensor) -> torch.Tensor:
    """(n, n) bool mask, True where two comments sit in different files."""
    return file_ids[:, None] != file_ids[None, :]


class CommentAttention(nn.Module):
    def __init__(self, cfg: RankerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.h = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.register_buffer("slot_bias", build_slot_bias(cfg.max_comments))

    def forward(self, x: torch.Tensor, file_ids: torch.Tensor, key_padding: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, d = x.shape
        if n != self.cfg.max_comments:
            raise ValueError(f"comments must be padded to {self.cfg.max_comments}, got {n}")
        if b != 1:
            raise ValueError("one pull request per call")
        bias = self.slot_bias
        if not self.cfg.cross_file_attention:
            bias = self.slot_bias.masked_fill_(make_cross_file_mask(file_ids[0]), float("-inf"))  # expect: MC524 buffer
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h) + bias
        if key_padding is not None:
            scores = scores.masked_fill(key_padding[:, None, None, :], torch.finfo(scores.dtype).min)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class CommentRanker(nn.Module):
    def __init__(self, cfg: RankerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.text = nn.Linear(cfg.text_dim, cfg.d_model)
        self.kind = nn.Embedding(len(CommentKind), cfg.d_model)
        self.file = nn.Embedding(cfg.num_files, cfg.d_model)
        self.attn = CommentAttention(cfg)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.score = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.ReLU(), nn.Linear(cfg.d_model, 1))

    def forward(self, pr: Dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.text(pr["text"]) + self.kind(pr["kind"]) + self.file(pr["file_ids"])
        x = x + self.attn(self.norm(x), pr["file_ids"], pr["padding"])
        scores = self.score(x).squeeze(-1)
        return scores.masked_fill(pr["padding"], float("-inf"))


def pad_pull_request(text: torch.Tensor, kind: torch.Tensor, file_ids: torch.Tensor,
                     cfg: RankerConfig) -> Dict[str, torch.Tensor]:
    """Pad one pull request's comments to max_comments; padding gets its own file id."""
    n = kind.numel()
    if n > cfg.max_comments:
        raise ValueError("too many comments; truncate before ranking")
    m = cfg.max_comments
    pr = {
        "text": torch.zeros(1, m, cfg.text_dim),
        "kind": torch.zeros(1, m, dtype=torch.long),
        "file_ids": torch.full((1, m), cfg.num_files - 1, dtype=torch.long),
        "padding": torch.ones(1, m, dtype=torch.bool),
    }
    pr["text"][0, :n], pr["kind"][0, :n], pr["file_ids"][0, :n] = text, kind, file_ids
    pr["padding"][0, :n] = False
    return pr


def listwise_loss(scores: torch.Tensor, relevance: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """ListNet loss over the real comments of one pull request."""
    target = relevance.masked_fill(padding, float("-inf")).softmax(-1)
    log_probs = scores.log_softmax(-1).masked_fill(padding, 0.0)
    return -(target * log_probs).sum(-1).mean()


def synthetic_pull_request(cfg: RankerConfig, n: int, gen: torch.Generator) -> Dict[str, torch.Tensor]:
    kind = torch.randint(0, len(CommentKind), (n,), generator=gen)
    files = torch.randint(0, 4, (n,), generator=gen)
    pr = pad_pull_request(torch.randn(n, cfg.text_dim, generator=gen), kind, files, cfg)
    relevance = torch.zeros(1, cfg.max_comments)
    relevance[0, :n] = (kind == CommentKind.BUG.value).float() * 2 + (kind == CommentKind.QUESTION.value).float()
    pr["relevance"] = relevance
    return pr


def rank_comments(model: CommentRanker, pr: Dict[str, torch.Tensor]) -> List[int]:
    model.eval()
    with torch.no_grad():
        scores = model(pr)[0]
    real = int((~pr["padding"][0]).sum())
    return scores.argsort(descending=True)[:real].tolist()


def train(model: CommentRanker, prs: Sequence[Dict[str, torch.Tensor]], epochs: int = 2) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        for pr in prs:
            loss = listwise_loss(model(pr), pr["relevance"], pr["padding"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return float(loss.detach())


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = RankerConfig()
    gen = torch.Generator().manual_seed(7)
    prs = [synthetic_pull_request(cfg, n, gen) for n in (5, 9, 3, 12)]
    model = CommentRanker(cfg)
    logger.info("last listwise loss %.4f", train(model, prs))
    print(rank_comments(model, prs[1]))
