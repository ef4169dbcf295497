"""Sentence embedding model with a multi-head attention pooling head and in-batch negatives.

Layout of UKPLab/sentence-transformers (models.Transformer, a pooling module, models.Normalize,
SentenceTransformer as nn.Sequential over a features dict, MultipleNegativesRankingLoss).
Source: conventions.md §1 (nn.MultiheadAttention row, HF 2-D attention_mask row, direction
cheat-sheet) and §5 item 1, seed self_attention_mask_guide.txt §2 and §7 Q1.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class InputExample:
    texts: list[str]
    label: int = 0


class Tokenizer:
    def __init__(self, vocab_size: int = 400, pad_token_id: int = 0, cls_token_id: int = 1) -> None:
        self.vocab_size, self.pad_token_id, self.cls_token_id = (
            vocab_size,
            pad_token_id,
            cls_token_id,
        )

    def __call__(self, texts: list[str], max_length: int = 32) -> dict[str, torch.Tensor]:
        rows = [
            [self.cls_token_id]
            + [2 + sum(map(ord, w)) % (self.vocab_size - 2) for w in t.lower().split()]
            for t in texts
        ]
        rows = [r[:max_length] for r in rows]
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)], attention_mask[i, : len(r)] = torch.tensor(r), 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class Transformer(nn.Module):
    def __init__(
        self, dim: int = 64, layers: int = 2, heads: int = 4, max_seq_length: int = 32
    ) -> None:
        super().__init__()
        self.tokenizer, self.max_seq_length = Tokenizer(), max_seq_length
        self.embeddings = nn.Embedding(self.tokenizer.vocab_size, dim, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_seq_length, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout=0.1, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(texts, max_length=self.max_seq_length)

    def get_word_embedding_dimension(self) -> int:
        return self.embeddings.embedding_dim

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = features["input_ids"]
        x = self.embeddings(ids) + self.position_embeddings(
            torch.arange(ids.shape[1], device=ids.device)
        )
        x = self.encoder(x, src_key_padding_mask=features["attention_mask"] == 0)
        features["token_embeddings"] = x
        return features


class MultiheadAttentionPooling(nn.Module):
    def __init__(
        self, word_embedding_dimension: int, num_heads: int = 4, num_probes: int = 1
    ) -> None:
        super().__init__()
        dim = word_embedding_dimension
        self.probe = nn.Parameter(torch.randn(1, num_probes, dim) * dim**-0.5)
        self.attention = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def get_sentence_embedding_dimension(self) -> int:
        return self.probe.shape[-1]

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        token_embeddings = features["token_embeddings"]
        attention_mask = features["attention_mask"].bool()
        probe = self.probe.expand(token_embeddings.shape[0], -1, -1)
        pooled, _ = self.attention(probe, token_embeddings, token_embeddings, key_padding_mask=attention_mask, need_weights=False)  # expect: MC502 stpool
        pooled = pooled + self.mlp(self.norm(pooled))
        features["sentence_embedding"] = pooled.mean(dim=1)
        return features


class Normalize(nn.Module):
    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        features["sentence_embedding"] = F.normalize(features["sentence_embedding"], p=2, dim=1)
        return features


class SentenceTransformer(nn.Sequential):
    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return self[0].tokenize(texts)

    @torch.no_grad()
    def encode(
        self, sentences: list[str], batch_size: int = 32, convert_to_tensor: bool = True
    ) -> torch.Tensor:
        self.eval()
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        chunks = []
        for start in range(0, len(sentences), batch_size):
            batch = [sentences[i] for i in order[start : start + batch_size]]
            chunks.append(self.forward(self.tokenize(batch))["sentence_embedding"])
        embeddings = torch.cat(chunks)[torch.argsort(torch.tensor(order))]
        self.train()
        return embeddings if convert_to_tensor else embeddings.numpy()


def cos_sim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a, dim=1) @ F.normalize(b, dim=1).T


class MultipleNegativesRankingLoss(nn.Module):
    def __init__(self, model: SentenceTransformer, scale: float = 20.0) -> None:
        super().__init__()
        self.model, self.scale = model, scale

    def forward(
        self, sentence_features: list[dict[str, torch.Tensor]], labels: torch.Tensor
    ) -> torch.Tensor:
        reps = [self.model(f)["sentence_embedding"] for f in sentence_features]
        anchors, candidates = reps[0], torch.cat(reps[1:])
        scores = cos_sim(anchors, candidates) * self.scale
        return F.cross_entropy(scores, torch.arange(len(scores), device=scores.device))


def smart_batching_collate(model: SentenceTransformer, batch: list[InputExample]):
    num_texts = len(batch[0].texts)
    features = [model.tokenize([ex.texts[i] for ex in batch]) for i in range(num_texts)]
    return features, torch.tensor([ex.label for ex in batch])


FACTS = [
    ("how tall is mount everest", "mount everest rises 8849 metres above sea level"),
    ("who wrote hamlet", "hamlet is a tragedy written by william shakespeare"),
    ("boiling point of water", "at sea level pure water boils at 100 degrees celsius"),
    ("capital of australia", "canberra is the capital city of australia"),
    ("speed of light", "light travels at about 300000 kilometres per second in vacuum"),
    ("largest planet", "jupiter is the largest planet in the solar system"),
    ("inventor of the telephone", "alexander graham bell patented the telephone"),
    ("longest river in africa", "the nile is the longest river in africa"),
    ("chemical symbol for gold", "gold has the chemical symbol au from latin aurum"),
    ("when did the berlin wall fall", "the berlin wall fell on 9 november 1989"),
    ("what do bees make", "honey bees produce honey and beeswax in the hive"),
    ("freezing point of water", "water freezes at 0 degrees celsius under normal pressure"),
]


def fit(
    model: SentenceTransformer, loss: MultipleNegativesRankingLoss, epochs: int, rng: random.Random
) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    examples = [InputExample(texts=[q, p]) for q, p in FACTS]
    for epoch in range(epochs):
        rng.shuffle(examples)
        for start in range(0, len(examples), 8):
            features, labels = smart_batching_collate(model, examples[start : start + 8])
            value = loss(features, labels)
            opt.zero_grad(set_to_none=True)
            value.backward()
            opt.step()
        if epoch % 20 == 0:
            print(f"epoch {epoch} loss {value.item():.3f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    transformer = Transformer()
    pooling = MultiheadAttentionPooling(transformer.get_word_embedding_dimension())
    model = SentenceTransformer(
        OrderedDict([("0", transformer), ("1", pooling), ("2", Normalize())])
    )
    fit(model, MultipleNegativesRankingLoss(model), epochs=60, rng=random.Random(0))
    corpus = [p for _, p in FACTS]
    corpus_embeddings = model.encode(corpus)
    query_embeddings = model.encode([q for q, _ in FACTS])
    hits = cos_sim(query_embeddings, corpus_embeddings).argmax(dim=1)
    print("top-1 accuracy", (hits == torch.arange(len(FACTS))).float().mean().item())
    alone = model.encode(corpus[:1])
    print("alone vs batched", (alone[0] - corpus_embeddings[0]).abs().max().item())
