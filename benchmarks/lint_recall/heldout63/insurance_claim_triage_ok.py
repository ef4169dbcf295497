"""Insurance claim triage: reads the first notice of loss and routes a claim to fast-track, adjuster review or the special investigations unit.

Source: conventions.md §1 (HF attention_mask row; direction cheat-sheet), §5 item 1; seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1.
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


class TriageDecision(Enum):
    FAST_TRACK = 0
    ADJUSTER_REVIEW = 1
    SPECIAL_INVESTIGATION = 2


class LineOfBusiness(Enum):
    AUTO = 0
    HOME = 1
    TRAVEL = 2
    PET = 3


@dataclass
class TriageConfig:
    vocab_size: int = 4096
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    max_tokens: int = 96
    sensitivity: float = 0.5

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError("hidden must be divisible by heads")
        if not 0.0 <= self.sensitivity <= 1.0:
            raise ValueError("sensitivity must be within [0, 1]")


class ClaimTokenizer:
    """Character-trigram hashing tokenizer with a Hugging Face style output dict."""

    def __init__(self, vocab_size: int, max_tokens: int) -> None:
        self.vocab_size, self.max_tokens = vocab_size, max_tokens

    def tokenize(self, text: str) -> List[int]:
        words = text.lower().split()
        return [1 + (sum(ord(c) * 31 ** i for i, c in enumerate(w[:3])) % (self.vocab_size - 1)) for w in words]

    def __call__(self, texts: Sequence[str], padding: str = "longest", return_tensors: str = "pt") -> Dict[str, torch.Tensor]:
        if padding != "longest" or return_tensors != "pt":
            raise ValueError("unsupported tokenizer options")
        ids = [self.tokenize(t)[: self.max_tokens] or [1] for t in texts]
        width = max(len(x) for x in ids)
        input_ids = torch.zeros(len(ids), width, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class ClaimSelfAttention(nn.Module):
    def __init__(self, cfg: TriageConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)
        self.output = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, hidden: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, h = hidden.shape
        shape = (b, n, self.heads, h // self.heads)
        q = self.query(hidden).view(shape).transpose(1, 2)
        k = self.key(hidden).view(shape).transpose(1, 2)
        v = self.value(hidden).view(shape).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        if attention_mask is not None:
            keep = attention_mask.bool()
            scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        probs = scores.softmax(dim=-1)
        return self.output(torch.matmul(probs, v).transpose(1, 2).reshape(b, n, h))


class ClaimEncoderLayer(nn.Module):
    def __init__(self, cfg: TriageConfig) -> None:
        super().__init__()
        self.attention = ClaimSelfAttention(cfg)
        self.attn_norm, self.ffn_norm = nn.LayerNorm(cfg.hidden), nn.LayerNorm(cfg.hidden)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(), nn.Linear(4 * cfg.hidden, cfg.hidden))

    def forward(self, hidden: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        hidden = self.attn_norm(hidden + self.attention(hidden, attention_mask))
        return self.ffn_norm(hidden + self.ffn(hidden))


class ClaimTriageModel(nn.Module):
    def __init__(self, cfg: TriageConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.positions = nn.Embedding(cfg.max_tokens, cfg.hidden)
        self.line_of_business = nn.Embedding(len(LineOfBusiness), cfg.hidden)
        self.encoder = nn.ModuleList(ClaimEncoderLayer(cfg) for _ in range(cfg.layers))
        self.amount = nn.Linear(1, cfg.hidden)
        self.classifier = nn.Linear(cfg.hidden, len(TriageDecision))

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
                line_of_business: torch.Tensor, claimed_amount: torch.Tensor) -> torch.Tensor:
        if input_ids.size(1) > self.cfg.max_tokens:
            raise ValueError("notice of loss exceeds max_tokens")
        if (claimed_amount < 0).any():
            raise ValueError("claimed amounts must be non-negative")
        hidden = self.embeddings(input_ids) + self.positions(torch.arange(input_ids.size(1)))
        for layer in self.encoder:
            hidden = layer(hidden, attention_mask)
        if attention_mask is None:
            pooled = hidden.mean(1)
        else:
            m = attention_mask.unsqueeze(-1).float()
            pooled = (hidden * m).sum(1) / m.sum(1)
        pooled = pooled + self.line_of_business(line_of_business) + self.amount(torch.log1p(claimed_amount)[:, None])
        return self.classifier(pooled)


def triage(model: ClaimTriageModel, tokenizer: ClaimTokenizer, notices: Sequence[str],
           lobs: Sequence[LineOfBusiness], amounts: Sequence[float]) -> List[TriageDecision]:
    """Decision per claim; SIU referral needs probability above the configured sensitivity."""
    model.eval()
    enc = tokenizer(notices)
    with torch.no_grad():
        probs = model(enc["input_ids"], enc["attention_mask"], torch.tensor([l.value for l in lobs]),
                      torch.tensor(amounts)).softmax(-1)
    decisions = []
    for row in probs:
        if row[TriageDecision.SPECIAL_INVESTIGATION.value] > model.cfg.sensitivity:
            decisions.append(TriageDecision.SPECIAL_INVESTIGATION)
        else:
            decisions.append(TriageDecision(int(row[:2].argmax())))
    return decisions


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = TriageConfig()
    model, tok = ClaimTriageModel(cfg), ClaimTokenizer(cfg.vocab_size, cfg.max_tokens)
    notices = ["rear-ended at a red light, bumper damage, other driver admitted fault",
               "kitchen flood from burst pipe while away on holiday for three weeks",
               "lost luggage"]
    lobs = [LineOfBusiness.AUTO, LineOfBusiness.HOME, LineOfBusiness.TRAVEL]
    amounts = [1800.0, 42000.0, 650.0]
    enc = tok(notices)
    logits = model(enc["input_ids"], enc["attention_mask"], torch.tensor([l.value for l in lobs]), torch.tensor(amounts))
    loss = F.cross_entropy(logits, torch.tensor([0, 2, 0]))
    loss.backward()
    logger.info("loss %.4f", loss.item())
    print([d.name for d in triage(model, tok, notices, lobs, amounts)])
