"""Contriever dense retriever fine-tuned on (query, positive, hard negative) triples.

Layout of facebookresearch/contriever (src/contriever.py mean pooling, src/inbatch.py,
finetuning.py with a collator over tokenizer outputs).
Source: pytorch/pytorch#103963 and huggingface/transformers#32195 (conventions.md §3 items 6
and 25), tools.md §0 P1, conventions.md §1 (SDPA row).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class BertConfig:
    vocab_size: int = 512
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0
    cls_token_id: int = 1
    sep_token_id: int = 2


class WordPieceTokenizer:
    def __init__(self, cfg: BertConfig) -> None:
        self.cfg = cfg

    def batch_encode_plus(
        self,
        texts: list[str],
        max_length: int = 48,
        padding: bool = True,
        truncation: bool = True,
        return_tensors: str = "pt",
    ) -> dict[str, torch.Tensor]:
        rows = []
        for text in texts:
            ids = [3 + sum(map(ord, w)) % (self.cfg.vocab_size - 3) for w in text.lower().split()]
            if truncation:
                ids = ids[: max_length - 2]
            rows.append([self.cfg.cls_token_id, *ids, self.cfg.sep_token_id])
        width = max(map(len, rows)) if padding else max_length
        input_ids = torch.full((len(rows), width), self.cfg.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)], attention_mask[i, : len(r)] = torch.tensor(r), 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.num_heads, self.dropout = cfg.num_attention_heads, cfg.attention_probs_dropout_prob
        self.qkv = nn.Linear(h, 3 * h)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=1e-12)
        self.ffn = nn.Sequential(
            nn.Linear(h, cfg.intermediate_size), nn.GELU(), nn.Linear(cfg.intermediate_size, h)
        )
        self.output_norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, n, d = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, dropout_p=self.dropout if self.training else 0.0
        )
        context = context.transpose(1, 2).reshape(b, n, d)
        hidden_states = self.attention_norm(hidden_states + self.attention_output(context))
        return self.output_norm(hidden_states + self.ffn(hidden_states))


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.config = cfg
        self.word_embeddings = nn.Embedding(
            cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id
        )
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.embeddings_norm = nn.LayerNorm(cfg.hidden_size, eps=1e-12)
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.embeddings_norm(
            self.word_embeddings(input_ids) + self.position_embeddings(positions)
        )
        extended_attention_mask = attention_mask[:, None, None, :].to(hidden.dtype)  # expect: MC508 contriever
        for layer in self.layer:
            hidden = layer(hidden, extended_attention_mask)
        return {"last_hidden_state": hidden}


class Contriever(BertModel):
    def __init__(self, cfg: BertConfig, pooling: str = "average") -> None:
        super().__init__(cfg)
        self.pooling = pooling

    def forward(self, input_ids, attention_mask, normalize: bool = False):
        model_output = super().forward(input_ids=input_ids, attention_mask=attention_mask)
        last_hidden = model_output["last_hidden_state"]
        last_hidden = last_hidden.masked_fill(~attention_mask[..., None].bool(), 0.0)
        if self.pooling == "average":
            emb = last_hidden.sum(dim=1) / attention_mask.sum(dim=1)[..., None]
        else:
            emb = last_hidden[:, 0]
        return F.normalize(emb, dim=-1) if normalize else emb


class InBatch(nn.Module):
    def __init__(
        self, retriever: Contriever, temperature: float = 0.05, label_smoothing: float = 0.0
    ) -> None:
        super().__init__()
        self.encoder, self.temperature, self.label_smoothing = (
            retriever,
            temperature,
            label_smoothing,
        )

    def forward(self, q_tokens, q_mask, k_tokens, k_mask, **kwargs):
        bsz = q_tokens.size(0)
        qemb = self.encoder(input_ids=q_tokens, attention_mask=q_mask, normalize=True)
        kemb = self.encoder(input_ids=k_tokens, attention_mask=k_mask, normalize=True)
        scores = torch.einsum("id, jd->ij", qemb / self.temperature, kemb)
        labels = torch.arange(bsz, dtype=torch.long, device=q_tokens.device)
        loss = F.cross_entropy(scores, labels, label_smoothing=self.label_smoothing)
        accuracy = (scores.argmax(-1) == labels).float().mean()
        return loss, {"accuracy": accuracy.item()}


class Collator:
    def __init__(self, tokenizer: WordPieceTokenizer, passage_maxlength: int = 48) -> None:
        self.tokenizer, self.passage_maxlength = tokenizer, passage_maxlength

    def __call__(self, batch: list[dict]) -> dict[str, torch.Tensor]:
        queries = [ex["question"] for ex in batch]
        passages = [ex["positive"] for ex in batch] + [ex["negative"] for ex in batch]
        qout = self.tokenizer.batch_encode_plus(queries, max_length=self.passage_maxlength)
        kout = self.tokenizer.batch_encode_plus(passages, max_length=self.passage_maxlength)
        return {
            "q_tokens": qout["input_ids"],
            "q_mask": qout["attention_mask"],
            "k_tokens": kout["input_ids"],
            "k_mask": kout["attention_mask"],
        }


TOPICS = {
    "river": "salmon delta flood estuary",
    "volcano": "magma lava crater eruption",
    "orbit": "satellite apogee gravity kepler",
    "violin": "bow strings stradivari luthier",
    "enzyme": "substrate catalyst protein kinetics",
    "harbor": "ferry dock pier tide",
    "glacier": "ice moraine crevasse fjord",
    "compiler": "parser bytecode register lexer",
}
FILLER = [
    "the",
    "a",
    "of",
    "in",
    "and",
    "is",
    "was",
    "for",
    "on",
    "with",
    "as",
    "by",
    "this",
    "that",
    "from",
]


def make_examples(n: int, rng: random.Random) -> list[dict]:
    examples, names = [], list(TOPICS)
    for _ in range(n):
        topic, other = rng.sample(names, 2)
        words = TOPICS[topic].split()
        question = f"what is {rng.choice(words)} {topic}"
        positive = " ".join([*rng.sample(words + FILLER, rng.randint(4, 14)), topic])
        negative = " ".join(
            [*rng.sample(TOPICS[other].split() + FILLER, rng.randint(4, 14)), other]
        )
        examples.append(
            {"question": question, "positive": positive, "negative": negative, "topic": topic}
        )
    return examples


@torch.no_grad()
def evaluate(model: Contriever, tokenizer: WordPieceTokenizer, examples: list[dict]) -> float:
    model.eval()
    passages = [ex["positive"] for ex in examples]
    p = tokenizer.batch_encode_plus(passages)
    q = tokenizer.batch_encode_plus([ex["question"] for ex in examples])
    scores = model(**q, normalize=True) @ model(**p, normalize=True).T
    top = scores.topk(5, dim=-1).indices
    hits = [
        any(examples[j]["topic"] == ex["topic"] for j in row.tolist())
        for ex, row in zip(examples, top, strict=True)
    ]
    model.train()
    return sum(hits) / len(hits)


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    config = BertConfig()
    tokenizer = WordPieceTokenizer(config)
    retriever = Contriever(config)
    model, collator = InBatch(retriever), Collator(tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(120):
        loss, stats = model(**collator(make_examples(32, rng)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 40 == 0:
            print(f"step {step} loss {loss.item():.3f} in-batch acc {stats['accuracy']:.2f}")
    print("recall@5", evaluate(retriever, tokenizer, make_examples(128, rng)))
    retriever.eval()
    texts = ["lava crater", "the ferry was at the dock for the tide in the harbor"]
    with torch.no_grad():
        batched = retriever(**tokenizer.batch_encode_plus(texts))[0]
        alone = retriever(**tokenizer.batch_encode_plus(texts[:1]))[0]
    print("alone vs batched", (batched - alone).abs().max().item())
