"""TinyBERT-style task distillation of a small BERT student from a fine-tuned BERT teacher.

Laid out after huawei-noah/Pretrained-Language-Model's TinyBERT (``task_distill.py``): one
``BertModel`` for teacher and student that can return the attention probabilities and hidden
states of every layer, the uniform layer mapping, ``fit_dense`` projecting the student's hidden
states to the teacher's width, the attention and hidden-state MSE losses and ``soft_cross_entropy``
on the logits at ``temperature``, on a synthetic sentiment task with negation.

Source: seed masked_fill_inplace.txt (注意, 梯度计算风险).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

POSITIVE, NEGATIVE = ["good", "great", "fine", "lovely"], ["bad", "awful", "poor", "boring"]
NEUTRAL = ["the", "movie", "plot", "was", "and", "actors", "music", "very", "quite"]


@dataclass
class BertConfig:
    vocab_size: int = 32
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 256
    max_position_embeddings: int = 32
    hidden_dropout_prob: float = 0.1
    num_labels: int = 2


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query, self.key = (
            nn.Linear(config.hidden_size, config.hidden_size),
            nn.Linear(config.hidden_size, config.hidden_size),
        )
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_attention_heads, self.attention_head_size).permute(
            0, 2, 1, 3
        )

    def forward(self, hidden_states, attention_mask, key_pad, output_attentions: bool = False):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = (
            query_layer @ key_layer.transpose(-1, -2) / math.sqrt(self.attention_head_size)
        )
        attention_probs = F.softmax(attention_scores + attention_mask, dim=-1)
        if output_attentions:
            attention_probs = attention_probs.masked_fill(key_pad, 0.0)
        context_layer = (self.dropout(attention_probs) @ value_layer).permute(0, 2, 1, 3)
        return context_layer.reshape(*hidden_states.shape), attention_probs


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask, key_pad, output_attentions: bool = False):
        context, probs = self.attention(hidden_states, attention_mask, key_pad, output_attentions)
        hidden_states = self.attention_norm(
            hidden_states + self.dropout(self.attention_output(context))
        )
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(hidden_states + self.dropout(ffn)), probs


class BertModel(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embeddings_norm = nn.LayerNorm(config.hidden_size)
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, output_attentions: bool = False):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden_states = self.embeddings_norm(
            self.word_embeddings(input_ids) + self.position_embeddings(positions)
        )
        extended_attention_mask = (
            1.0 - attention_mask[:, None, None, :].to(hidden_states.dtype)
        ) * torch.finfo(hidden_states.dtype).min
        key_pad = (attention_mask == 0)[:, None, None, :]
        all_hidden_states, all_attentions = [hidden_states], []
        for layer_module in self.layer:
            hidden_states, probs = layer_module(
                hidden_states, extended_attention_mask, key_pad, output_attentions
            )
            all_hidden_states.append(hidden_states)
            all_attentions.append(probs)
        logits = self.classifier(torch.tanh(self.pooler(hidden_states[:, 0])))
        return logits, all_attentions, all_hidden_states


def soft_cross_entropy(predicts: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (-targets.softmax(dim=-1) * predicts.log_softmax(dim=-1)).sum(-1).mean()


class TinyBertDistiller(nn.Module):
    def __init__(self, student: BertModel, teacher: BertModel, temperature: float = 1.0):
        super().__init__()
        self.student, self.teacher, self.temperature = student, teacher, temperature
        self.fit_dense = nn.Linear(student.config.hidden_size, teacher.config.hidden_size)
        self.layers_per_block = teacher.config.num_hidden_layers // student.config.num_hidden_layers

    def forward(self, input_ids, attention_mask):
        student_logits, student_atts, student_reps = self.student(
            input_ids, attention_mask, output_attentions=True
        )
        with torch.no_grad():
            teacher_logits, teacher_atts, teacher_reps = self.teacher(
                input_ids, attention_mask, output_attentions=True
            )
        new_teacher_atts = [
            teacher_atts[(i + 1) * self.layers_per_block - 1] for i in range(len(student_atts))
        ]
        att_loss = sum(F.mse_loss(s, t) for s, t in zip(student_atts, new_teacher_atts))
        new_teacher_reps = [
            teacher_reps[i * self.layers_per_block] for i in range(len(student_reps))
        ]
        rep_loss = sum(
            F.mse_loss(self.fit_dense(s), t) for s, t in zip(student_reps, new_teacher_reps)
        )
        cls_loss = soft_cross_entropy(
            student_logits / self.temperature, teacher_logits / self.temperature
        )
        return att_loss + rep_loss + cls_loss


def make_batch(rng: random.Random, vocab: dict[str, int], n: int):
    sentences, labels = [], []
    for _ in range(n):
        words = rng.choices(NEUTRAL, k=rng.randint(2, 10))
        label = rng.random() < 0.5
        negate = rng.random() < 0.4
        cue = rng.choice(POSITIVE if label != negate else NEGATIVE)
        words.insert(rng.randrange(len(words) + 1), f"not {cue}" if negate else cue)
        sentences.append([vocab["[CLS]"], *(vocab[w] for w in " ".join(words).split())])
        labels.append(int(label))
    width = max(len(s) for s in sentences)
    input_ids = torch.tensor([s + [0] * (width - len(s)) for s in sentences])
    return input_ids, (input_ids != 0).long(), torch.tensor(labels)


def accuracy(model: BertModel, batch) -> float:
    model.eval()
    with torch.no_grad():
        logits, _, _ = model(batch[0], batch[1])
    model.train()
    return (logits.argmax(-1) == batch[2]).float().mean().item()


def main() -> None:
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab = {w: i for i, w in enumerate(["[PAD]", "[CLS]", "not", *POSITIVE, *NEGATIVE, *NEUTRAL])}
    teacher = BertModel(BertConfig())
    opt = torch.optim.AdamW(teacher.parameters(), lr=5e-4)
    for _ in range(200):
        input_ids, attention_mask, labels = make_batch(rng, vocab, 32)
        loss = F.cross_entropy(teacher(input_ids, attention_mask)[0], labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    test = make_batch(rng, vocab, 512)
    print(f"teacher accuracy {accuracy(teacher, test):.3f}")
    teacher.eval()
    student = BertModel(
        BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
        )
    )
    distiller = TinyBertDistiller(student, teacher)
    opt = torch.optim.AdamW(
        [p for n, p in distiller.named_parameters() if not n.startswith("teacher.")], lr=1e-3
    )
    for step in range(200):
        input_ids, attention_mask, _ = make_batch(rng, vocab, 32)
        loss = distiller(input_ids, attention_mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} distillation loss {loss.item():.4f}")
    print(f"student accuracy {accuracy(student, test):.3f}")


if __name__ == "__main__":
    main()
