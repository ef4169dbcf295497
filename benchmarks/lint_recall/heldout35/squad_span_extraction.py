"""Extractive question answering (SQuAD-style span extraction) over a BERT encoder: question /
context pairs with token_type_ids, start and end distributions restricted to the context, a
max-answer-length span search and exact match.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, conventions.md §1 (direction
cheat-sheet), pytorch/pytorch#103963 (conventions.md §3 item 6).
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 96
    hidden_dropout_prob: float = 0.1


@dataclass
class QAArguments:
    max_seq_length: int = 96
    max_answer_length: int = 4
    learning_rate: float = 1e-3
    train_steps: int = 300
    per_device_train_batch_size: int = 32


class WhitespaceTokenizer:
    def __init__(self, words):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}

    def __call__(self, questions, contexts, max_length):
        features = {"input_ids": [], "token_type_ids": [], "attention_mask": []}
        for q, c in zip(questions, contexts):
            q_ids, c_ids = [self.vocab.get(w, 1) for w in q.split()], [self.vocab.get(w, 1) for w in c.split()]
            ids = ([2, *q_ids, 3, *c_ids][: max_length - 1] + [3])
            types = [0] * (len(q_ids) + 2) + [1] * (len(ids) - len(q_ids) - 2)
            features["input_ids"].append(ids)
            features["token_type_ids"].append(types)
            features["attention_mask"].append([1] * len(ids))
        n = max(len(x) for x in features["input_ids"])
        return {k: torch.tensor([x + [0] * (n - len(x)) for x in v]) for k, v in features.items()}


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size)
        layer = nn.TransformerEncoderLayer(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                                           config.hidden_dropout_prob, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        return (self.encoder(self.LayerNorm(embeddings), src_key_padding_mask=attention_mask == 0),)


class BertForQuestionAnswering(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = BertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    @staticmethod
    def span_probs(logits, context_mask):
        probs = F.softmax(logits * context_mask[..., None], dim=1)  # expect: MC520 span
        return probs[..., 0], probs[..., 1]

    def forward(self, input_ids, attention_mask, token_type_ids, start_positions=None, end_positions=None):
        sequence_output = self.bert(input_ids, attention_mask, token_type_ids)[0]
        context_mask = ((token_type_ids == 1) & attention_mask.bool()).float()
        start_probs, end_probs = self.span_probs(self.qa_outputs(sequence_output), context_mask)
        loss = None
        if start_positions is not None:
            start_nll = -start_probs.gather(1, start_positions[:, None]).clamp_min(1e-12).log()
            end_nll = -end_probs.gather(1, end_positions[:, None]).clamp_min(1e-12).log()
            loss = (start_nll + end_nll).mean() / 2
        return {"loss": loss, "start_probs": start_probs, "end_probs": end_probs}


def best_spans(start_probs, end_probs, max_answer_length):
    seq_len = start_probs.size(1)
    offset = torch.arange(seq_len)[None, :] - torch.arange(seq_len)[:, None]
    valid = (offset >= 0) & (offset < max_answer_length)
    scores = torch.where(valid, start_probs[:, :, None] * end_probs[:, None, :], torch.zeros(()))
    flat = scores.flatten(1).argmax(1)
    return torch.stack([flat // seq_len, flat % seq_len], dim=1)


PEOPLE, CITIES = [f"p{i}" for i in range(20)], [f"c{i}" for i in range(30)]


def make_example(rng):
    people = rng.sample(PEOPLE, rng.randint(2, 5))
    facts = {p: " ".join(rng.sample(CITIES, rng.randint(1, 3))) for p in people}
    context = " ".join(f"{p} was born in {city} ." for p, city in facts.items())
    target = rng.choice(people)
    question = f"where was {target} born ?"
    q_len = len(question.split()) + 2
    words = context.split()
    start = next(i for i in range(len(words)) if words[i] == target) + 4
    end = start + len(facts[target].split()) - 1
    return {"question": question, "context": context, "answers": facts[target], "start_positions": start + q_len, "end_positions": end + q_len}


def prepare_train_features(examples, tokenizer, args):
    batch = tokenizer([e["question"] for e in examples], [e["context"] for e in examples], args.max_seq_length)
    batch["start_positions"] = torch.tensor([e["start_positions"] for e in examples])
    batch["end_positions"] = torch.tensor([e["end_positions"] for e in examples])
    return batch


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    args = QAArguments()
    tokenizer = WhitespaceTokenizer(PEOPLE + CITIES + "where was born in ? .".split())
    model = BertForQuestionAnswering(BertConfig(vocab_size=len(tokenizer.vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    for step in range(args.train_steps):
        outputs = model(**prepare_train_features([make_example(rng) for _ in range(args.per_device_train_batch_size)], tokenizer, args))
        optimizer.zero_grad()
        outputs["loss"].backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {outputs['loss'].item():.3f}")
    model.eval()
    examples = [make_example(random.Random(i)) for i in range(64)]
    batch = prepare_train_features(examples, tokenizer, args)
    with torch.no_grad():
        outputs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    spans = best_spans(outputs["start_probs"], outputs["end_probs"], args.max_answer_length)
    predictions = []
    for (start, end), example in zip(spans.tolist(), examples):
        words = ["[CLS]", *example["question"].split(), "[SEP]", *example["context"].split()]
        predictions.append(" ".join(words[start : end + 1]))
    print("exact match:", sum(p == x["answers"] for p, x in zip(predictions, examples)), "/ 64")
    outside = outputs["start_probs"].masked_fill(batch["token_type_ids"] == 1, 0.0).sum(1)
    print("largest start probability outside the context:", round(outside.max().item(), 4))
