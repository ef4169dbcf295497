"""Longformer-style extractive QA with sliding-window attention and global question tokens.

Layout after allenai/longformer and transformers' `modeling_longformer.py`, with the band
kept dense for a small model: each `LongformerSelfAttention` holds a sliding-window bias of
`attention_window` as a buffer, the [CLS] token and the question are global (they attend to
everything and everything attends to them), `LongformerForQuestionAnswering` predicts start
and end logits over the context, and a collator pads the questions of a batch to a common
question slot so that the global tokens form a prefix. The demo asks for the two tokens that
follow a key token named in the question.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 张量共享内存风险); seed
self_attention_mask_guide.txt §6 (local window, Longformer / BigBird).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP, WHAT = 0, 1, 2, 3


@dataclass
class LongformerConfig:
    vocab_size: int = 64
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    intermediate_size: int = 128
    attention_window: int = 8
    max_position_embeddings: int = 128


def sliding_window_bias(max_len: int, one_sided: int) -> torch.Tensor:
    pos = torch.arange(max_len)
    far = (pos[:, None] - pos[None, :]).abs() > one_sided
    return torch.zeros(max_len, max_len).masked_fill(far, float("-inf"))


class LongformerSelfAttention(nn.Module):
    def __init__(self, config: LongformerConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.query_global = nn.Linear(config.hidden_size, config.hidden_size)
        bias = sliding_window_bias(config.max_position_embeddings, config.attention_window // 2)
        self.register_buffer("window_bias", bias)

    def _heads(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, key_keep, num_global_tokens: int):
        T = hidden_states.shape[1]
        positions = torch.arange(self.window_bias.shape[0], device=hidden_states.device)
        is_global = positions < num_global_tokens
        global_pairs = is_global[:, None] | is_global[None, :]
        bias = self.window_bias.masked_fill_(global_pairs, 0.0)[:T, :T]  # expect: MC524 longformer
        q_local = self.query(hidden_states)
        q_global = self.query_global(hidden_states)
        q = torch.where(is_global[:T, None], q_global, q_local)
        q, k, v = (
            self._heads(q),
            self._heads(self.key(hidden_states)),
            self._heads(self.value(hidden_states)),
        )
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
        scores = scores.masked_fill(~key_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        return (probs @ v).transpose(1, 2).reshape(hidden_states.shape)


class LongformerLayer(nn.Module):
    def __init__(self, config: LongformerConfig):
        super().__init__()
        self.attention = LongformerSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.norm2 = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, key_keep, num_global_tokens):
        attn = self.attention(hidden_states, key_keep, num_global_tokens)
        h = self.norm1(hidden_states + self.attention_output(attn))
        return self.norm2(h + self.output(F.gelu(self.intermediate(h))))


class LongformerModel(nn.Module):
    def __init__(self, config: LongformerConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, PAD)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embed_norm = nn.LayerNorm(config.hidden_size)
        self.layer = nn.ModuleList(LongformerLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids, attention_mask, num_global_tokens):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.embed_norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        key_keep = attention_mask.bool()
        for layer_module in self.layer:
            h = layer_module(h, key_keep, num_global_tokens)
        return h


class LongformerForQuestionAnswering(nn.Module):
    def __init__(self, config: LongformerConfig):
        super().__init__()
        self.longformer = LongformerModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    def forward(
        self, input_ids, attention_mask, num_global_tokens, start_positions=None, end_positions=None
    ):
        sequence_output = self.longformer(input_ids, attention_mask, num_global_tokens)
        start_logits, end_logits = self.qa_outputs(sequence_output).unbind(dim=-1)
        context = (
            torch.arange(input_ids.shape[1], device=input_ids.device)[None] > num_global_tokens
        )
        valid = context & attention_mask.bool()
        start_logits = start_logits.masked_fill(~valid, torch.finfo(start_logits.dtype).min)
        end_logits = end_logits.masked_fill(~valid, torch.finfo(end_logits.dtype).min)
        loss = None
        if start_positions is not None:
            loss = (
                F.cross_entropy(start_logits, start_positions)
                + F.cross_entropy(end_logits, end_positions)
            ) / 2
        return loss, start_logits, end_logits


def make_example(rng: random.Random):
    key = rng.randrange(10, 20)
    question = [WHAT, key] + [rng.randrange(20, 64) for _ in range(rng.randrange(0, 5))]
    context = [rng.randrange(20, 64) for _ in range(rng.randrange(40, 90))]
    p = rng.randrange(len(context) - 3)
    context[p] = key
    return question, context, p + 1, p + 2


def collate(examples):
    q_slot = max(len(q) for q, _, _, _ in examples)
    num_global = 1 + q_slot
    width = max(num_global + 1 + len(c) for _, c, _, _ in examples)
    ids = torch.full((len(examples), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(examples), width, dtype=torch.long)
    starts, ends = [], []
    for i, (q, c, s, e) in enumerate(examples):
        ids[i, 0] = CLS
        ids[i, 1 : 1 + len(q)] = torch.tensor(q)
        ids[i, num_global] = SEP
        ids[i, num_global + 1 : num_global + 1 + len(c)] = torch.tensor(c)
        mask[i, : 1 + len(q)] = 1
        mask[i, num_global : num_global + 1 + len(c)] = 1
        starts.append(num_global + 1 + s)
        ends.append(num_global + 1 + e)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "num_global_tokens": num_global,
        "start_positions": torch.tensor(starts),
        "end_positions": torch.tensor(ends),
    }


def exact_match(model, examples, batch_size=16):
    hits = 0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = collate(examples[i : i + batch_size])
            _, start_logits, end_logits = model(**batch)
            ok = (start_logits.argmax(-1) == batch["start_positions"]) & (
                end_logits.argmax(-1) == batch["end_positions"]
            )
            hits += int(ok.sum())
    return hits / len(examples)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    config = LongformerConfig()
    model = LongformerForQuestionAnswering(config)
    fresh_band = sliding_window_bias(config.max_position_embeddings, config.attention_window // 2)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(300):
        batch = collate([make_example(rng) for _ in range(16)])
        loss, _, _ = model(**batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    test = [make_example(random.Random(5000 + i)) for i in range(64)]
    print(f"exact match {exact_match(model, test):.3f}")
    stored = model.longformer.layer[0].attention.window_bias
    stored_pairs, fresh_pairs = int((stored == 0).sum()), int((fresh_band == 0).sum())
    print(f"attendable pairs in layer 0's stored bias {stored_pairs}, in a fresh one {fresh_pairs}")


if __name__ == "__main__":
    main()
