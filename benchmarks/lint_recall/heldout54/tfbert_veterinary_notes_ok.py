"""Syndromic surveillance of small-animal consultations from the vet's free-text note.

A PyTorch port of google-research/bert (TensorFlow 1.x `modeling.py` and `run_classifier.py`)
for SAVSNET-style main presenting complaints: `BertConfig.from_dict`, `convert_single_example`
padding `input_ids` / `input_mask` / `segment_ids` to `max_seq_length`,
`create_attention_mask_from_input_mask`, the `attention_layer` / `transformer_model`
functions as modules, `get_pooled_output` and the `create_model` head with `output_weights`.
The notes are generated: complaint words with negations ("no vomiting, coughing since monday").

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md 3.20), 5.5
"""

import math
import random
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTENTION_MASK_FILL = -10000.0
LABELS = ["gastroenteric", "respiratory", "pruritus", "other"]
SIGNS = {0: ["vomiting", "diarrhoea", "inappetent"], 1: ["coughing", "sneezing", "dyspnoea"], 2: ["scratching", "itchy", "alopecia"]}
OTHER = ["vaccination", "booster", "nail", "clip", "weight", "check", "dental", "lump"]
CONTEXT = ["dog", "cat", "owner", "reports", "since", "monday", "two", "days", "bright", "alert", "eating", "ok", "o", "e", "nad"]


@dataclass
class BertConfig:
    vocab_size: int
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 64
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, json_object):
        return cls(**{f.name: json_object[f.name] for f in fields(cls) if f.name in json_object})


def make_note(rng):
    label = rng.randrange(4)
    phrases = [[w] for w in rng.sample(CONTEXT, rng.randint(2, 7))]
    phrases += [[rng.choice(SIGNS[label])]] if label < 3 else [[w] for w in rng.sample(OTHER, 2)]
    if rng.random() < 0.5:
        phrases.append(["no", rng.choice(SIGNS[(label + rng.randint(1, 2)) % 3])])
    rng.shuffle(phrases)
    return " ".join(w for phrase in phrases for w in phrase), label


class FullTokenizer:
    def __init__(self):
        words = sorted({w for s in SIGNS.values() for w in s} | set(OTHER) | set(CONTEXT) | {"no"})
        self.vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + words)}


def convert_single_example(text, tokenizer, max_seq_length):
    tokens = ["[CLS]"] + text.split()[:max_seq_length - 2] + ["[SEP]"]
    input_ids = [tokenizer.vocab.get(t, 1) for t in tokens]
    input_mask = [1] * len(input_ids)
    padding = max_seq_length - len(input_ids)
    return input_ids + [0] * padding, input_mask + [0] * padding, [0] * max_seq_length


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    batch_size, from_seq_length = from_tensor.shape[:2]
    broadcast_ones = torch.ones(batch_size, from_seq_length, 1, device=from_tensor.device)
    return broadcast_ones * to_mask[:, None, :].float()


class AttentionLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.size_per_head = config.hidden_size // config.num_attention_heads
        self.query_layer, self.key_layer, self.value_layer = (nn.Linear(config.hidden_size, config.hidden_size) for _ in range(3))
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.size_per_head).transpose(1, 2)

    def forward(self, from_tensor, to_tensor, attention_mask):
        query = self.transpose_for_scores(self.query_layer(from_tensor))
        key = self.transpose_for_scores(self.key_layer(to_tensor))
        value = self.transpose_for_scores(self.value_layer(to_tensor))
        attention_scores = query @ key.transpose(-1, -2) * (1.0 / math.sqrt(self.size_per_head))
        attention_scores = attention_scores.masked_fill(attention_mask[:, None] == 0, ATTENTION_MASK_FILL)
        attention_probs = self.dropout(torch.softmax(attention_scores, dim=-1))
        return (attention_probs @ value).transpose(1, 2).flatten(2)


class TransformerLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = AttentionLayer(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ln_attention, self.ln_output = nn.LayerNorm(config.hidden_size, eps=1e-12), nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, layer_input, attention_mask):
        attention_output = self.dropout(self.attention_output(self.attention(layer_input, layer_input, attention_mask)))
        attention_output = self.ln_attention(attention_output + layer_input)
        layer_output = self.dropout(self.output(F.gelu(self.intermediate(attention_output))))
        return self.ln_output(layer_output + attention_output)


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.full_position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embedding_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids, input_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        embedding_output = self.embedding_norm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
                                               + self.full_position_embeddings(positions))
        attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
        sequence_output = embedding_output
        for layer in self.layers:
            sequence_output = layer(sequence_output, attention_mask)
        return torch.tanh(self.pooler(sequence_output[:, 0]))


class Classifier(nn.Module):
    def __init__(self, config, num_labels):
        super().__init__()
        self.bert = BertModel(config)
        self.output_weights = nn.Parameter(torch.randn(num_labels, config.hidden_size) * config.initializer_range)
        self.output_bias = nn.Parameter(torch.zeros(num_labels))
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids, input_mask, segment_ids):
        return self.dropout(self.bert(input_ids, input_mask, segment_ids)) @ self.output_weights.t() + self.output_bias


def features(notes, tokenizer, max_seq_length=48):
    converted = [convert_single_example(text, tokenizer, max_seq_length) for text, _ in notes]
    input_ids, input_mask, segment_ids = (torch.tensor(x) for x in zip(*converted))
    return input_ids, input_mask, segment_ids, torch.tensor([label for _, label in notes])


def main():
    rng = random.Random(5)
    torch.manual_seed(5)
    tokenizer = FullTokenizer()
    config = BertConfig.from_dict({"vocab_size": len(tokenizer.vocab), "hidden_size": 64, "num_hidden_layers": 2})
    model = Classifier(config, len(LABELS))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for step in range(250):
        input_ids, input_mask, segment_ids, label_ids = features([make_note(rng) for _ in range(32)], tokenizer)
        loss = F.cross_entropy(model(input_ids, input_mask, segment_ids), label_ids)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    input_ids, input_mask, segment_ids, label_ids = features([make_note(rng) for _ in range(500)], tokenizer)
    with torch.no_grad():
        predictions = model(input_ids, input_mask, segment_ids).argmax(-1)
    print("loss %.3f  eval_accuracy %.3f" % (loss.item(), (predictions == label_ids).float().mean()))


if __name__ == "__main__":
    main()
