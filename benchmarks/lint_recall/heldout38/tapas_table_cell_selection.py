"""TAPAS-style table question answering by cell selection.

Layout after google-research/tapas and its transformers port: a `TableTokenizer` that
flattens the question and the table row by row and emits the segment / column / row
`token_type_ids`, `TapasEmbeddings` summing one embedding table per token type, a BERT
encoder, and `TapasForQuestionAnswering` scoring tokens with `output_weights`, averaging
them per cell through a product index of rows and columns (`segment_mean`) and training a
softmax over the cells. Questions name a column and a value and ask for the cell holding it.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md §3
item 21); conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP = 0, 1, 2
WHICH = 5
COLUMN_NAME_BASE, NUMBER_BASE = 10, 20


@dataclass
class TapasConfig:
    vocab_size: int = 64
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 96
    type_vocab_sizes: list[int] = field(default_factory=lambda: [2, 8, 8])
    max_num_rows: int = 8
    max_num_columns: int = 8
    temperature: float = 1.0


class TableTokenizer:
    def encode(self, question: list[int], header: list[int], rows: list[list[int]]):
        ids, types = [CLS, *question, SEP], [[0, 0, 0]] * (len(question) + 2)
        for c, name in enumerate(header):
            ids.append(name)
            types.append([1, c + 1, 0])
        for r, row in enumerate(rows):
            for c, value in enumerate(row):
                ids.append(NUMBER_BASE + value)
                types.append([1, c + 1, r + 1])
        return ids, types

    def __call__(self, examples, return_tensors: str = "pt"):
        encoded = [self.encode(*ex) for ex in examples]
        width = max(len(ids) for ids, _ in encoded)
        batch = {
            "input_ids": torch.full((len(encoded), width), PAD, dtype=torch.long),
            "attention_mask": torch.zeros(len(encoded), width, dtype=torch.long),
            "token_type_ids": torch.zeros(len(encoded), width, 3, dtype=torch.long),
        }
        for i, (ids, types) in enumerate(encoded):
            batch["input_ids"][i, : len(ids)] = torch.tensor(ids)
            batch["attention_mask"][i, : len(ids)] = 1
            batch["token_type_ids"][i, : len(ids)] = torch.tensor(types)
        return batch


class TapasEmbeddings(nn.Module):
    def __init__(self, config: TapasConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, PAD)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.ModuleList(
            nn.Embedding(n, config.hidden_size) for n in config.type_vocab_sizes
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        for i, emb in enumerate(self.token_type_embeddings):
            embeddings = embeddings + emb(token_type_ids[:, :, i])
        return self.LayerNorm(embeddings)


class TapasSelfAttention(nn.Module):
    def __init__(self, config: TapasConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        return x.view(*x.shape[:2], self.num_heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size)
        scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1)
        return (probs @ v).permute(0, 2, 1, 3).reshape(hidden_states.shape)


class TapasLayer(nn.Module):
    def __init__(self, config: TapasConfig):
        super().__init__()
        self.attention = TapasSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)

    def forward(self, hidden_states, attention_mask):
        attn = self.attention_output(self.attention(hidden_states, attention_mask))
        h = self.attention_norm(hidden_states + attn)
        return self.output_norm(h + self.output(F.gelu(self.intermediate(h))))


class TapasModel(nn.Module):
    def __init__(self, config: TapasConfig):
        super().__init__()
        self.embeddings = TapasEmbeddings(config)
        self.layer = nn.ModuleList(TapasLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(3)  # expect: MC514 tapas
        hidden_states = self.embeddings(input_ids, token_type_ids)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        return hidden_states


def segment_mean(values, index, num_segments):
    """Mean of `values` (B, T) per segment id in `index` (B, T); also returns the counts."""
    sums = values.new_zeros(values.shape[0], num_segments).scatter_add(1, index, values)
    counts = values.new_zeros(values.shape[0], num_segments).scatter_add(
        1, index, torch.ones_like(values)
    )
    return sums / counts.clamp(min=1.0), counts


class TapasForQuestionAnswering(nn.Module):
    def __init__(self, config: TapasConfig):
        super().__init__()
        self.config = config
        self.tapas = TapasModel(config)
        self.output_weights = nn.Parameter(torch.randn(config.hidden_size) * 0.02)
        self.output_bias = nn.Parameter(torch.zeros(()))

    def cell_index(self, token_type_ids):
        rows, cols = token_type_ids[:, :, 2], token_type_ids[:, :, 1]
        is_cell = (rows > 0) & (cols > 0)
        index = rows * self.config.max_num_columns + cols
        return torch.where(is_cell, index, torch.zeros_like(index))

    def forward(self, input_ids, attention_mask, token_type_ids, labels=None):
        sequence_output = self.tapas(input_ids, attention_mask, token_type_ids)
        token_logits = (
            sequence_output @ self.output_weights + self.output_bias
        ) / self.config.temperature
        num_cells = (
            self.config.max_num_rows * self.config.max_num_columns + self.config.max_num_columns
        )
        cell_logits, counts = segment_mean(token_logits, self.cell_index(token_type_ids), num_cells)
        cell_logits = cell_logits.masked_fill(counts == 0, torch.finfo(cell_logits.dtype).min)
        cell_logits[:, 0] = torch.finfo(cell_logits.dtype).min
        loss = None if labels is None else F.cross_entropy(cell_logits, labels)
        return loss, cell_logits


def make_example(rng: random.Random, config: TapasConfig):
    n_rows, n_cols = rng.randint(2, 5), rng.randint(2, 4)
    header = rng.sample(range(COLUMN_NAME_BASE, NUMBER_BASE), n_cols)
    rows = [rng.sample(range(40), n_cols) for _ in range(n_rows)]
    col, target_row = rng.randrange(n_cols), rng.randrange(n_rows)
    question = [WHICH, header[col], NUMBER_BASE + rows[target_row][col]]
    label = (target_row + 1) * config.max_num_columns + col + 1
    return (question, header, rows), label


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    config = TapasConfig()
    tokenizer = TableTokenizer()
    model = TapasForQuestionAnswering(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(300):
        examples = [make_example(rng, config) for _ in range(32)]
        batch = tokenizer([ex for ex, _ in examples])
        loss, _ = model(**batch, labels=torch.tensor([lab for _, lab in examples]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    test = [make_example(random.Random(10_000 + i), config) for i in range(64)]
    with torch.no_grad():
        batch = tokenizer([ex for ex, _ in test])
        _, cell_logits = model(**batch)
        alone = tokenizer([test[0][0]])
        _, alone_logits = model(**alone)
    acc = (cell_logits.argmax(-1) == torch.tensor([lab for _, lab in test])).float().mean().item()
    real = alone_logits[0] > torch.finfo(alone_logits.dtype).min
    gap = (alone_logits[0][real] - cell_logits[0][real]).abs().max().item()
    print(f"cell selection accuracy {acc:.3f}; first table alone vs padded in the batch {gap:.2e}")


if __name__ == "__main__":
    main()
