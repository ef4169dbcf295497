"""Next-play predictor for American football: reads the drive so far as event tokens and predicts the offense's next play call.

Source: conventions.md §1 (HF attention_mask row; nn.MultiheadAttention row), §2.4, §5 item 7.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class PlayCall(str, Enum):
    RUN_INSIDE = "run_inside"
    RUN_OUTSIDE = "run_outside"
    PASS_SHORT = "pass_short"
    PASS_DEEP = "pass_deep"
    PUNT = "punt"
    FIELD_GOAL = "field_goal"


@dataclass
class PlayModelConfig:
    d_model: int = 64
    nhead: int = 4
    num_layers: int = 2
    dim_feedforward: int = 128
    max_events: int = 40
    special_tokens: List[str] = field(default_factory=lambda: ["<pad>", "<cls>", "<unk>"])

    def __post_init__(self) -> None:
        if self.d_model % self.nhead:
            raise ValueError("d_model must be divisible by nhead")
        if self.special_tokens[0] != "<pad>":
            raise ValueError("the pad token must come first")


class DriveTokenizer:
    """Turns drive events ('1st&10', 'own25', 'pass_short', ...) into ids, Hugging Face style."""

    def __init__(self, cfg: PlayModelConfig) -> None:
        self.cfg = cfg
        downs = [f"{d}&{y}" for d in range(1, 5) for y in range(1, 21)]
        fields = [f"own{y}" for y in range(1, 51)] + [f"opp{y}" for y in range(1, 50)]
        plays = [p.value for p in PlayCall] + ["sack", "penalty", "timeout", "first_down", "incomplete"]
        self.vocab = {tok: i for i, tok in enumerate(cfg.special_tokens + downs + fields + plays)}

    @property
    def pad_id(self) -> int:
        return self.vocab["<pad>"]

    def __call__(self, drives: Sequence[Sequence[str]], return_tensors: str = "pt") -> Dict[str, torch.Tensor]:
        if return_tensors != "pt":
            raise ValueError("only 'pt' tensors are returned")
        rows = [[self.vocab["<cls>"]] + [self.vocab.get(t, self.vocab["<unk>"]) for t in d] for d in drives]
        rows = [r[-self.cfg.max_events:] for r in rows]
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention_mask[i, : len(r)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class PlayPredictor(nn.Module):
    def __init__(self, cfg: PlayModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(vocab_size, cfg.d_model, padding_idx=0)
        self.pos = nn.Embedding(cfg.max_events + 1, cfg.d_model)
        layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.nhead, cfg.dim_feedforward, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(cfg.d_model, len(PlayCall))

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if input_ids.size(1) > self.cfg.max_events + 1:
            raise ValueError("drive longer than max_events")
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        padding_mask: Optional[torch.Tensor] = None
        if attention_mask is not None:
            padding_mask = attention_mask == 0
        h = self.encoder(x, src_key_padding_mask=padding_mask)
        return self.head(h[:, 0])


_PREDICTORS: Dict[str, PlayModelConfig] = {}


def register_predictor(name: str, cfg: PlayModelConfig) -> None:
    if name in _PREDICTORS:
        raise KeyError(f"predictor {name!r} already registered")
    _PREDICTORS[name] = cfg


def create_predictor(name: str) -> tuple:
    cfg = _PREDICTORS[name]
    tokenizer = DriveTokenizer(cfg)
    logger.info("predictor %s: vocab %d", name, len(tokenizer.vocab))
    return PlayPredictor(cfg, len(tokenizer.vocab)), tokenizer


register_predictor("default", PlayModelConfig())
register_predictor("wide", PlayModelConfig(d_model=96, nhead=6, dim_feedforward=192))


def predict_next_play(model: PlayPredictor, tokenizer: DriveTokenizer,
                      drives: Sequence[Sequence[str]]) -> List[Dict[str, float]]:
    """Probability of each play call for the next snap of each drive."""
    model.eval()
    batch = tokenizer(drives)
    with torch.no_grad():
        probs = model(**batch).softmax(-1)
    return [{p.value: round(float(x), 3) for p, x in zip(PlayCall, row)} for row in probs]



def yards_to_goal(drive: Sequence[str]) -> Optional[int]:
    """Yards to the end zone from the last field-position token of a drive."""
    for token in reversed(drive):
        if token.startswith("own"):
            return 100 - int(token[3:])
        if token.startswith("opp"):
            return int(token[3:])
    return None


def validate_drive(drive: Sequence[str], tokenizer: DriveTokenizer) -> None:
    unknown = [t for t in drive if t not in tokenizer.vocab]
    if unknown:
        raise ValueError(f"unknown drive events: {unknown}")

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    model, tokenizer = create_predictor("default")
    drives = [
        ["1&10", "own25", "run_inside", "2&6", "own29", "pass_short", "first_down", "1&10", "own41"],
        ["3&8", "opp35", "incomplete", "4&8", "opp35"],
        ["1&10", "own10", "sack", "2&17", "own3"],
    ]
    labels = torch.tensor([3, 5, 1])
    for drive in drives:
        validate_drive(drive, tokenizer)
    batch = tokenizer(drives)
    model.train()
    loss = F.cross_entropy(model(**batch), labels)
    loss.backward()
    logger.info("loss %.4f", loss.item())
    for drive, probs in zip(drives, predict_next_play(model, tokenizer, drives)):
        print(drive[-1], yards_to_goal(drive), max(probs, key=probs.get))
