"""Held-out 14 (correct twin): the pooling head of a text-classification toolkit in which every choice comes
from a config string; the head dispatches on `config.pooling` with a `match` statement
("cls", "mean", "max", "attention") and receives the tokenizer's batch dict (int64
`attention_mask`, 1 = real token).

Source: FudanNLP/fastNLP#138 and InseeFrLab/torchTextClassifiers PR #96 (a 1 = real keep-mask
used as the masked_fill condition), the seed guide's Q1 (True used where False was meant), and
`maskcheck explain MC519`: `scores.masked_fill(attention_mask.bool(), -inf)` hides every real
token and keeps the padding; a sentence without padding gets a NaN row.
Twin: the fill condition is `attention_mask == 0` (every sentence has a real token).
Surroundings: a `match` / `case` statement on a config string selecting the pooling.
"""

from dataclasses import dataclass
from typing import Dict

import torch
from torch import nn


@dataclass
class HeadConfig:
    hidden_size: int = 64
    num_labels: int = 4
    pooling: str = "attention"
    dropout: float = 0.1


class PoolingHead(nn.Module):
    def __init__(self, config: HeadConfig):
        super().__init__()
        self.config = config
        self.attn_scorer = nn.Linear(config.hidden_size, 1)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        match self.config.pooling:
            case "cls":
                return hidden[:, 0]
            case "mean":
                keep = attention_mask.unsqueeze(-1).to(hidden.dtype)
                return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1.0)
            case "max":
                pad = (attention_mask == 0).unsqueeze(-1)
                return hidden.masked_fill(pad, torch.finfo(hidden.dtype).min).amax(1)
            case "attention":
                scores = self.attn_scorer(hidden).squeeze(-1)
                scores = scores.masked_fill(attention_mask == 0, float("-inf"))
                weights = scores.softmax(dim=-1)
                return torch.einsum("bt,bth->bh", weights, hidden)
            case other:
                raise ValueError(f"unknown pooling {other!r}")

    def forward(self, hidden: torch.Tensor, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        pooled = self.pool(hidden, batch["attention_mask"])
        return self.classifier(self.dropout(pooled))


class TextClassifier(nn.Module):
    def __init__(self, vocab_size: int = 500, config: HeadConfig = HeadConfig()):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, config.hidden_size, padding_idx=0)
        self.encoder = nn.GRU(config.hidden_size, config.hidden_size, batch_first=True)
        self.head = PoolingHead(config)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        hidden, _ = self.encoder(self.embed(batch["input_ids"]))
        return self.head(hidden, batch)
