"""An MS MARCO-style cross-encoder reranker (MiniLM layout over nn.TransformerEncoder): query /
passage pairs, BCE training on positives and mined negatives, sentence-transformers-like
`CrossEncoder.predict` / `rank`, and a TorchScript wrapper for serving.

Source: conventions.md §1 (nn.MultiheadAttention row, HF 2-D attention_mask row, direction cheat-sheet)
and §2.5, seed self_attention_mask_guide.txt §2.
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CrossEncoderConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    hidden_dropout_prob: float = 0.1
    num_labels: int = 1


class PairTokenizer:
    def __init__(self, words):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}
        self.model_max_length = 64

    def __call__(self, first, second, max_length=None):
        max_length = max_length or self.model_max_length
        rows = []
        for a, b in zip(first, second):
            a_ids, b_ids = [self.vocab.get(w, 1) for w in a.split()], [self.vocab.get(w, 1) for w in b.split()]
            ids = [2, *a_ids, 3, *b_ids][: max_length - 1] + [3]
            rows.append((ids, [0] * (len(a_ids) + 2) + [1] * (len(ids) - len(a_ids) - 2)))
        n = max(len(ids) for ids, _ in rows)
        return {
            "input_ids": torch.tensor([ids + [0] * (n - len(ids)) for ids, _ in rows]),
            "token_type_ids": torch.tensor([tt + [0] * (n - len(tt)) for _, tt in rows]),
            "attention_mask": torch.tensor([[1] * len(ids) + [0] * (n - len(ids)) for ids, _ in rows]),
        }


class MiniLMForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.embeddings_norm = nn.LayerNorm(config.hidden_size)
        layer = nn.TransformerEncoderLayer(
            config.hidden_size, config.num_attention_heads, config.intermediate_size,
            config.hidden_dropout_prob, activation="gelu", batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh())
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids):
        attention_mask = attention_mask.to(torch.bool)
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        hidden = self.encoder(self.embeddings_norm(hidden), src_key_padding_mask=attention_mask)  # expect: MC502 rerank
        return self.classifier(self.pooler(hidden[:, 0]))


class RerankerForExport(nn.Module):
    """Fixed signature for TorchScript serving: ids, mask and segments in, probabilities out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return torch.sigmoid(self.model(input_ids, attention_mask, token_type_ids).squeeze(-1))


class CrossEncoder:
    def __init__(self, model, tokenizer, max_length=64):
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length

    @torch.no_grad()
    def predict(self, sentences, batch_size=16):
        self.model.eval()
        scores = []
        for start in range(0, len(sentences), batch_size):
            queries, passages = zip(*sentences[start : start + batch_size])
            features = self.tokenizer(list(queries), list(passages), max_length=self.max_length)
            scores.append(torch.sigmoid(self.model(**features).squeeze(-1)))
        return torch.cat(scores)

    def rank(self, query, documents, top_k=None):
        scores = self.predict([(query, doc) for doc in documents])
        order = scores.argsort(descending=True)[:top_k]
        return [{"corpus_id": int(i), "score": float(scores[i])} for i in order]


TOPICS = {t: [f"{t}{i}" for i in range(12)] for t in ("sport", "food", "music", "law", "space")}


def make_triplet(rng):
    topic, other = rng.sample(list(TOPICS), 2)
    query = " ".join(rng.sample(TOPICS[topic], 2))
    positive = " ".join(rng.sample(TOPICS[topic], rng.randint(3, 10)) + query.split()[:1])
    negative = " ".join(rng.sample(TOPICS[other], rng.randint(3, 10)) + rng.sample(TOPICS[topic], 1))
    return query, positive, negative


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = PairTokenizer([w for words in TOPICS.values() for w in words])
    model = MiniLMForSequenceClassification(CrossEncoderConfig(vocab_size=len(tokenizer.vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(200):
        triplets = [make_triplet(rng) for _ in range(16)]
        pairs = [(q, p) for q, p, _ in triplets] + [(q, n) for q, _, n in triplets]
        labels = torch.tensor([1.0] * 16 + [0.0] * 16)
        features = tokenizer([q for q, _ in pairs], [p for _, p in pairs])
        loss = F.binary_cross_entropy_with_logits(model(**features).squeeze(-1), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    reranker = CrossEncoder(model, tokenizer)
    triplets = [make_triplet(random.Random(i)) for i in range(32)]
    scores = reranker.predict([(q, p) for q, p, _ in triplets] + [(q, n) for q, _, n in triplets])
    print("pairwise accuracy:", (scores[:32] > scores[32:]).float().mean().item(), "NaN scores:", int(scores.isnan().sum()))
    print("ranking:", reranker.rank(triplets[0][0], [triplets[0][2], triplets[0][1], triplets[1][1]]))
    example = tokenizer([triplets[0][0]] * 2, [triplets[0][1], triplets[0][2]])
    traced = torch.jit.trace(RerankerForExport(model).eval(), (example["input_ids"], example["attention_mask"], example["token_type_ids"]), check_trace=False)
    with torch.no_grad():
        eager = RerankerForExport(model)(example["input_ids"], example["attention_mask"], example["token_type_ids"])
    print("traced vs eager:", (traced(example["input_ids"], example["attention_mask"], example["token_type_ids"]) - eager).abs().max().item())
