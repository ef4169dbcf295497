"""LayoutLM token classification for form understanding (FUNSD-style entity labelling).

Written after microsoft/unilm (layoutlm) and transformers' models/layoutlm/modeling_layoutlm.py
(LayoutLMEmbeddings adding x / y / h / w position embeddings of the 0-1000 normalised
``bbox`` to the word, position and token-type embeddings, LayoutLMSelfAttention,
LayoutLMLayer, LayoutLMForTokenClassification) and the FUNSD fine-tuning recipe
(``normalize_bbox``, the word label on the first sub-token and -100 on the others,
DataCollatorForTokenClassification padding ``bbox`` with [0, 0, 0, 0]).

Source: TransformerLensOrg/TransformerLens PR #366, conventions.md §3 item 20 and §5 item 5, seed masked_fill_inplace.txt (例子).
"""
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LABELS = ["O", "B-HEADER", "I-HEADER", "B-QUESTION", "I-QUESTION", "B-ANSWER", "I-ANSWER"]


def normalize_bbox(bbox, width, height):
    return [int(1000 * bbox[0] / width), int(1000 * bbox[1] / height), int(1000 * bbox[2] / width), int(1000 * bbox[3] / height)]


class WordPieceStub:
    def __init__(self, words):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
        for w in words:
            for piece in self.split(w):
                self.vocab.setdefault(piece, len(self.vocab))

    @staticmethod
    def split(word):
        return [word] if len(word) <= 5 else [word[:5], "##" + word[5:]]

    def encode_words(self, words, boxes, word_labels):
        input_ids, bbox, labels = [self.vocab["[CLS]"]], [[0, 0, 0, 0]], [-100]
        for word, box, label in zip(words, boxes, word_labels):
            pieces = self.split(word)
            input_ids += [self.vocab.get(p, 1) for p in pieces]
            bbox += [box] * len(pieces)
            labels += [LABELS.index(label)] + [-100] * (len(pieces) - 1)
        input_ids.append(self.vocab["[SEP]"])
        bbox.append([1000, 1000, 1000, 1000])
        labels.append(-100)
        return {"input_ids": input_ids, "bbox": bbox, "labels": labels}


class DataCollatorForTokenClassification:
    label_pad_token_id = -100

    def __call__(self, features):
        max_len = max(len(f["input_ids"]) for f in features)
        batch = {"input_ids": [], "bbox": [], "attention_mask": [], "labels": []}
        for f in features:
            pad = max_len - len(f["input_ids"])
            batch["input_ids"].append(f["input_ids"] + [0] * pad)
            batch["bbox"].append(f["bbox"] + [[0, 0, 0, 0]] * pad)
            batch["attention_mask"].append([1] * len(f["input_ids"]) + [0] * pad)
            batch["labels"].append(f["labels"] + [self.label_pad_token_id] * pad)
        return {k: torch.tensor(v) for k, v in batch.items()}


@dataclass
class LayoutLMConfig:
    vocab_size: int = 256
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 128
    max_2d_position_embeddings: int = 1024
    num_labels: int = len(LABELS)
    layer_norm_eps: float = 1e-12


class LayoutLMEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.x_position_embeddings = nn.Embedding(config.max_2d_position_embeddings, config.hidden_size)
        self.y_position_embeddings = nn.Embedding(config.max_2d_position_embeddings, config.hidden_size)
        self.h_position_embeddings = nn.Embedding(config.max_2d_position_embeddings, config.hidden_size)
        self.w_position_embeddings = nn.Embedding(config.max_2d_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, bbox):
        position_ids = torch.arange(input_ids.size(1), device=input_ids.device)[None]
        embeddings = (
            self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
            + self.x_position_embeddings(bbox[:, :, 0]) + self.y_position_embeddings(bbox[:, :, 1])
            + self.x_position_embeddings(bbox[:, :, 2]) + self.y_position_embeddings(bbox[:, :, 3])
            + self.h_position_embeddings(bbox[:, :, 3] - bbox[:, :, 1])
            + self.w_position_embeddings(bbox[:, :, 2] - bbox[:, :, 0])
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        )
        return self.LayerNorm(embeddings)


class LayoutLMSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores.masked_fill(attention_mask == 0, -1e-9)  # expect: MC516 layoutlm
        attention_probs = F.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (-1,))


class LayoutLMLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = LayoutLMSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention_norm(hidden_states + self.attention_output(self.attention(hidden_states, attention_mask)))
        return self.output_norm(attention_output + self.output(F.gelu(self.intermediate(attention_output))))


class LayoutLMForTokenClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = LayoutLMEmbeddings(config)
        self.layer = nn.ModuleList(LayoutLMLayer(config) for _ in range(config.num_hidden_layers))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, bbox, attention_mask=None, labels=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
        hidden_states = self.embeddings(input_ids, bbox)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask=extended_attention_mask)
        logits = self.classifier(hidden_states)
        loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.view(-1)) if labels is not None else None
        return {"loss": loss, "logits": logits}


def synthetic_form(rng, vocab_words, width=800, height=1000):
    words, boxes, labels = [], [], []
    y = 40
    for i, w in enumerate(rng.sample(vocab_words, rng.randint(1, 3))):
        words.append(w.upper())
        boxes.append(normalize_bbox([300 + 90 * i, y, 380 + 90 * i, y + 30], width, height))
        labels.append("B-HEADER" if i == 0 else "I-HEADER")
    for _ in range(rng.randint(2, 6)):
        y += 60
        for part, x0, tag in (("QUESTION", 40, rng.randint(1, 3)), ("ANSWER", 420, rng.randint(1, 3))):
            for i, w in enumerate(rng.sample(vocab_words, tag)):
                words.append(w + ":" if part == "QUESTION" and i == tag - 1 else w)
                boxes.append(normalize_bbox([x0 + 110 * i, y, x0 + 110 * i + 100, y + 20], width, height))
                labels.append(("B-" if i == 0 else "I-") + part)
    return words, boxes, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab_words = "date name address phone signature total amount invoice number company fax street city zipcode".split()
    forms = [synthetic_form(rng, vocab_words) for _ in range(96)]
    tokenizer = WordPieceStub([w for f in forms for w in f[0]])
    features = [tokenizer.encode_words(*f) for f in forms]
    collator = DataCollatorForTokenClassification()
    model = LayoutLMForTokenClassification(LayoutLMConfig(vocab_size=len(tokenizer.vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(60):
        batch = collator(features[(step * 8) % 80 : (step * 8) % 80 + 8])
        out = model(**batch)
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} loss {out['loss'].item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = collator(features[80:])
        preds = model(**batch)["logits"].argmax(-1)
        keep = batch["labels"] != -100
        print("eval token accuracy:", (preds[keep] == batch["labels"][keep]).float().mean().item())
        short = min(features, key=lambda f: len(f["input_ids"]))
        long = max(features, key=lambda f: len(f["input_ids"]))
        n = len(short["input_ids"])
        batched = model(**collator([short, long]))["logits"][0, :n]
        alone = model(**collator([short]))["logits"][0]
        print("padded vs alone:", (batched - alone).abs().max().item())
