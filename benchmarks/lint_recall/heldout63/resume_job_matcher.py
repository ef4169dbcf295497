"""Resume/job-posting matcher: a bi-encoder that embeds resumes and postings for recruiter search.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); huggingface/transformers#32195 (conventions.md §3 item 25); conventions.md §2.9, §5 item 7.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class Tower(str, Enum):
    RESUME = "resume"
    POSTING = "posting"


class PoolingStrategy(str, Enum):
    CLS = "cls"
    MEAN = "mean"


@dataclass
class MatcherConfig:
    vocab_size: int = 2048
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_length: int = 128
    pooling: PoolingStrategy = PoolingStrategy.MEAN
    temperature: float = 0.05

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError("hidden_size must be divisible by num_heads")
        if not 0.0 < self.temperature <= 1.0:
            raise ValueError("temperature must be in (0, 1]")


class WordPieceLikeTokenizer:
    """Whitespace tokenizer returning input_ids and attention_mask like a Hugging Face tokenizer."""

    cls_id, pad_id = 1, 0

    def __init__(self, vocab_size: int, max_length: int) -> None:
        self.vocab_size, self.max_length = vocab_size, max_length

    def __call__(self, texts: List[str], padding: bool = True, return_tensors: str = "pt") -> Dict[str, torch.Tensor]:
        if not padding or return_tensors != "pt":
            raise ValueError("this tokenizer only pads to tensors")
        rows = [[self.cls_id] + [2 + sum(map(ord, w)) % (self.vocab_size - 2) for w in t.split()] for t in texts]
        rows = [r[: self.max_length] for r in rows]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        return {"input_ids": ids, "attention_mask": mask}


class SelfAttention(nn.Module):
    def __init__(self, cfg: MatcherConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, hidden: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, h = hidden.shape
        q, k, v = self.qkv(hidden).view(b, n, 3, self.num_heads, h // self.num_heads).permute(2, 0, 3, 1, 4)
        attn_mask: Optional[torch.Tensor] = None
        if attention_mask is not None:
            attn_mask = attention_mask[:, None, None, :].to(q.dtype)  # expect: MC508 tokenizer
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out(ctx.transpose(1, 2).reshape(b, n, h))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: MatcherConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.ln2 = nn.LayerNorm(cfg.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, hidden: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        hidden = self.ln1(hidden + self.attn(hidden, attention_mask))
        return self.ln2(hidden + self.ffn(hidden))


class TextTower(nn.Module):
    def __init__(self, cfg: MatcherConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos = nn.Embedding(cfg.max_length, cfg.hidden_size)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        hidden = self.tok(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        for layer in self.layers:
            hidden = layer(hidden, attention_mask)
        if self.cfg.pooling is PoolingStrategy.CLS or attention_mask is None:
            pooled = hidden[:, 0]
        else:
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-6)
        return F.normalize(pooled, dim=-1)


class ResumeJobMatcher(nn.Module):
    def __init__(self, cfg: MatcherConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.towers = nn.ModuleDict({t.value: TextTower(cfg) for t in Tower})

    def encode(self, tower: Tower, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        return self.towers[tower.value](batch["input_ids"], batch.get("attention_mask"))

    def forward(self, resumes: Dict[str, torch.Tensor], postings: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        r = self.encode(Tower.RESUME, resumes)
        p = self.encode(Tower.POSTING, postings)
        logits = r @ p.T / self.cfg.temperature
        labels = torch.arange(logits.size(0), device=logits.device)
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
        return loss, logits


def build_matcher(**overrides: object) -> Tuple[ResumeJobMatcher, WordPieceLikeTokenizer]:
    cfg = MatcherConfig(**overrides)
    logger.info("matcher: %s", cfg)
    return ResumeJobMatcher(cfg), WordPieceLikeTokenizer(cfg.vocab_size, cfg.max_length)


def top_postings(model: ResumeJobMatcher, tokenizer: WordPieceLikeTokenizer, resume: str,
                 postings: List[str], k: int = 2) -> List[Tuple[str, float]]:
    """The k postings closest to one resume."""
    if k < 1:
        raise ValueError("k must be at least 1")
    model.eval()
    with torch.no_grad():
        r = model.encode(Tower.RESUME, tokenizer([resume]))
        p = model.encode(Tower.POSTING, tokenizer(postings))
    sims = (r @ p.T).squeeze(0)
    best = sims.topk(min(k, len(postings)))
    return [(postings[i], float(s)) for s, i in zip(best.values, best.indices)]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    model, tokenizer = build_matcher()
    resumes = ["senior python engineer with pytorch and kubernetes experience",
               "registered nurse, icu, eight years",
               "accountant cpa audit"]
    postings = ["machine learning engineer pytorch",
                "icu nurse night shifts at a regional hospital with relocation support",
                "audit senior for a mid-size accounting firm"]
    loss, _ = model(tokenizer(resumes), tokenizer(postings))
    loss.backward()
    logger.info("contrastive loss %.4f", loss.item())
    print(top_postings(model, tokenizer, resumes[0], postings))
