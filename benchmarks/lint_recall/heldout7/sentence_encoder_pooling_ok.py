"""Held-out 7 (correct twin): a sentence-transformers style encoder wrapper with an attention-pooling head and a
cross-encoder scorer, the tokenizer called inside the same methods.

Source: the seed article's masked_fill semantics ("value is written where mask is True") against a
tokenizer's 1 = real token mask (the keep-mask used as the fill condition, here after
`.unsqueeze(-1).bool()` on a `features` dict), the seed guide's "additive, not multiplicative"
(a tokenizer mask multiplied into pooling logits that then go through softmax), conventions.md
section 1 (`~` on the int64 tokenizer mask, here the `.bitwise_not()` method).
Surroundings: a features dict, a pooling module, method chains, type annotations.
"""

from typing import Dict, List

import torch
from torch import Tensor, nn


class AttentionPooling(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, token_embeddings: Tensor, attention_mask: Tensor) -> Tensor:
        att = self.score(token_embeddings).squeeze(-1)
        att = att.masked_fill(attention_mask == 0, torch.finfo(att.dtype).min)
        return torch.einsum("bt,btd->bd", att.softmax(-1), token_embeddings)


class SentenceEncoder(nn.Module):
    def __init__(self, backbone: nn.Module, tokenizer, dim: int = 768):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pool = AttentionPooling(dim)
        self.cls = nn.Linear(dim, 1)

    def tokenize(self, texts: List[str]) -> Dict[str, Tensor]:
        return self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")

    def encode(self, texts: List[str]) -> Tensor:
        features = self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        emb = self.backbone(**features).last_hidden_state
        att = self.cls(emb).squeeze(-1)
        att = att.masked_fill(~features["attention_mask"].bool(), -1e4)
        return torch.einsum("bt,btd->bd", att.softmax(dim=-1), emb)

    def score_pairs(self, queries: List[str], docs: List[str]) -> Tensor:
        features = self.tokenizer(queries, docs, padding=True, truncation="only_second", return_tensors="pt")
        emb = self.backbone(**features).last_hidden_state
        logits = self.cls(emb).squeeze(-1).masked_fill(features["attention_mask"] == 0, float("-inf"))
        weights = logits.softmax(-1)
        return (weights.unsqueeze(-1) * emb).sum(1).norm(dim=-1)

    def mean_pool(self, texts: List[str]) -> Tensor:
        features = self.tokenizer(texts, padding=True, return_tensors="pt")
        emb = self.backbone(**features).last_hidden_state
        pad = features["attention_mask"].bool().bitwise_not()
        emb = emb.masked_fill(pad.unsqueeze(-1), 0.0)
        return emb.sum(1) / features["attention_mask"].sum(-1, keepdim=True)
