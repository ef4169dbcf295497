"""Character-level named-entity recognition with a BERT encoder and a linear-chain CRF head
(BERT-NER-Pytorch's BertCrfForNer with pytorch-crf's CRF), BIOS tags and span-level F1.

Source: conventions.md §1 (HF 4.x AttentionMaskConverter row) and §2.9, huggingface/transformers#32195
(conventions.md §3 item 25).
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LABELS = ["X", "O", "B-PER", "I-PER", "S-PER", "B-LOC", "I-LOC", "S-LOC", "B-ORG", "I-ORG", "S-ORG", "[START]", "[END]"]


@dataclass
class BertConfig:
    vocab_size: int = 64
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    num_labels: int = len(LABELS)


@dataclass
class InputFeatures:
    input_ids: list
    input_mask: list
    segment_ids: list
    label_ids: list
    input_len: int


class CRF(nn.Module):
    def __init__(self, num_tags, batch_first=True):
        super().__init__()
        self.num_tags, self.batch_first = num_tags, batch_first
        self.start_transitions = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end_transitions = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))

    def forward(self, emissions, tags, mask, reduction="mean"):
        if self.batch_first:
            emissions, tags, mask = emissions.transpose(0, 1), tags.transpose(0, 1), mask.transpose(0, 1)
        llh = self._compute_score(emissions, tags, mask) - self._compute_normalizer(emissions, mask)
        return llh.sum() / mask.float().sum() if reduction == "token_mean" else llh.mean()

    def _compute_score(self, emissions, tags, mask):
        seq_length, batch_size = tags.shape
        mask = mask.type_as(emissions)
        arange = torch.arange(batch_size)
        score = self.start_transitions[tags[0]] + emissions[0, arange, tags[0]]
        for i in range(1, seq_length):
            score = score + self.transitions[tags[i - 1], tags[i]] * mask[i] + emissions[i, arange, tags[i]] * mask[i]
        seq_ends = mask.long().sum(dim=0) - 1
        return score + self.end_transitions[tags[seq_ends, arange]]

    def _compute_normalizer(self, emissions, mask):
        score = self.start_transitions + emissions[0]
        for i in range(1, emissions.size(0)):
            next_score = torch.logsumexp(score.unsqueeze(2) + self.transitions + emissions[i].unsqueeze(1), dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
        return torch.logsumexp(score + self.end_transitions, dim=1)

    def decode(self, emissions, mask):
        emissions, mask = emissions.transpose(0, 1), mask.transpose(0, 1)
        score, history = self.start_transitions + emissions[0], []
        for i in range(1, emissions.size(0)):
            next_score, indices = (score.unsqueeze(2) + self.transitions + emissions[i].unsqueeze(1)).max(dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
            history.append(indices)
        score = score + self.end_transitions
        seq_ends = mask.long().sum(dim=0) - 1
        best_tags_list = []
        for idx in range(emissions.size(1)):
            best_tags = [score[idx].argmax().item()]
            for hist in reversed(history[: seq_ends[idx]]):
                best_tags.append(hist[idx][best_tags[-1]].item())
            best_tags_list.append(best_tags[::-1])
        return best_tags_list


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query, self.key, self.value = (nn.Linear(config.hidden_size, config.hidden_size) for _ in range(3))
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask):
        bsz, n, d = hidden_states.shape
        q, k, v = (f(hidden_states).view(bsz, n, self.num_heads, -1).transpose(1, 2) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / (d // self.num_heads) ** 0.5 + attention_mask
        context = F.softmax(scores, dim=-1) @ v
        return self.dense(context.transpose(1, 2).reshape(bsz, n, d))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask):
        hidden_states = self.norm1(hidden_states + self.dropout(self.attention(hidden_states, attention_mask)))
        return self.norm2(hidden_states + self.dropout(self.output(F.gelu(self.intermediate(hidden_states)))))


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def get_extended_attention_mask(self, attention_mask, dtype):
        extended_attention_mask = attention_mask[:, None, None, :]
        extended_attention_mask = (1.0 - extended_attention_mask.to(dtype=dtype)) * torch.finfo(dtype).min
        return extended_attention_mask

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        hidden_states = self.LayerNorm(embeddings)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        return (hidden_states,)


class BertCrfForNer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.crf = CRF(num_tags=config.num_labels, batch_first=True)

    def forward(self, input_ids, attention_mask, token_type_ids, labels=None, input_lens=None):
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits = self.classifier(self.dropout(outputs[0]))
        if labels is not None:
            return -1 * self.crf(emissions=logits, tags=labels, mask=attention_mask), logits
        return (logits,)


def get_entity_bios(seq):
    chunks, chunk = [], [-1, -1, -1]
    for i, tag in enumerate(seq):
        if tag.startswith("S-"):
            chunks.append([tag[2:], i, i])
            chunk = [-1, -1, -1]
        elif tag.startswith("B-"):
            chunk = [tag[2:], i, i]
        elif tag.startswith("I-") and chunk[0] == tag[2:]:
            chunk[2] = i
            if i == len(seq) - 1 or not seq[i + 1].startswith("I-"):
                chunks.append(list(chunk))
        else:
            chunk = [-1, -1, -1]
    return chunks


def make_features(rng, max_seq_length=40):
    chars, labels = [], []
    while len(chars) < rng.randint(8, 30):
        if rng.random() < 0.3:
            kind = rng.choice(["PER", "LOC", "ORG"])
            base = {"PER": 30, "LOC": 40, "ORG": 50}[kind]
            span = [base + rng.randrange(10) for _ in range(rng.randint(1, 4))]
            tags = [f"S-{kind}"] if len(span) == 1 else [f"B-{kind}"] + [f"I-{kind}"] * (len(span) - 1)
            chars, labels = chars + span, labels + tags
        else:
            chars.append(rng.randrange(4, 30))
            labels.append("O")
    input_ids = [2, *chars[: max_seq_length - 2], 3]
    label_ids = [LABELS.index(x) for x in ["O", *labels[: max_seq_length - 2], "O"]]
    return InputFeatures(input_ids, [1] * len(input_ids), [0] * len(input_ids), label_ids, len(input_ids))


def collate_fn(features):
    max_len = max(f.input_len for f in features)
    pad = lambda xs: torch.tensor([x + [0] * (max_len - len(x)) for x in xs])  # noqa: E731
    return {
        "input_ids": pad([f.input_ids for f in features]),
        "attention_mask": pad([f.input_mask for f in features]).bool(),
        "token_type_ids": pad([f.segment_ids for f in features]),
        "labels": pad([f.label_ids for f in features]),
        "input_lens": torch.tensor([f.input_len for f in features]),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    model = BertCrfForNer(BertConfig())
    optimizer = torch.optim.AdamW([
        {"params": model.bert.parameters(), "lr": 1e-3},
        {"params": [*model.classifier.parameters(), *model.crf.parameters()], "lr": 5e-3},
    ])
    try:
        for step in range(120):
            loss, _ = model(**collate_fn([make_features(rng) for _ in range(16)]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 40 == 0:
                print(f"step {step} loss {loss.item():.3f}")
    except RuntimeError as err:
        print("training failed:", err)
        raise SystemExit(0) from None
    model.eval()
    features = [make_features(random.Random(i)) for i in range(32)]
    batch = collate_fn(features)
    with torch.no_grad():
        (logits,) = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        paths = model.crf.decode(logits, batch["attention_mask"])
    gold = {(i, *map(str, c)) for i, f in enumerate(features) for c in get_entity_bios([LABELS[t] for t in f.label_ids])}
    pred = {(i, *map(str, c)) for i, p in enumerate(paths) for c in get_entity_bios([LABELS[t] for t in p])}
    precision, recall = len(gold & pred) / max(len(pred), 1), len(gold & pred) / max(len(gold), 1)
    print(f"span F1 {2 * precision * recall / max(precision + recall, 1e-9):.3f}")
