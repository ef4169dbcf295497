"""Local citation recommendation: score candidate papers for a citation context (ACL-ARC / unarXive style).

A pair is ``[CLS] context with [CITE] [SEP] candidate title and abstract [SEP]``; a BERT-like
cross-encoder scores it, and training uses one positive and sampled negatives per context with a
listwise softmax loss. The encoder follows the Hugging Face layout: the model turns the tokenizer's
0/1 ``attention_mask`` into an extended mask once and hands it to every layer. Training runs through
Accelerate with gradient accumulation.

Source: seed self_attention_mask_guide.txt section 3 (常见误区: 加法而非乘法), section 7 Q3; conventions.md section 1 (direction cheat-sheet, additive masks)
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from accelerate import Accelerator
except ImportError:
    class Accelerator:
        def __init__(self, gradient_accumulation_steps=1, **kwargs):
            self.device = torch.device("cpu")
            self.gradient_accumulation_steps = gradient_accumulation_steps

        def prepare(self, *objects):
            return objects

        def accumulate(self, model):
            return contextlib.nullcontext()

        def backward(self, loss):
            loss.backward()

VOCAB, CLS, SEP, PAD, CITE = 400, 1, 2, 0, 3
MODEL_ARGS = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                  max_position_embeddings=96, hidden_dropout_prob=0.1)


class SelfAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, **_):
        super().__init__()
        self.num_heads = num_attention_heads
        self.head_dim = hidden_size // num_attention_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)

    def transpose_for_scores(self, x):
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = nn.functional.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).flatten(2)
        return self.dense(ctx)


class Layer(nn.Module):
    def __init__(self, **cfg):
        super().__init__()
        self.attention = SelfAttention(**cfg)
        self.ln1 = nn.LayerNorm(cfg["hidden_size"])
        self.ln2 = nn.LayerNorm(cfg["hidden_size"])
        self.ffn = nn.Sequential(nn.Linear(cfg["hidden_size"], cfg["intermediate_size"]), nn.GELU(),
                                 nn.Linear(cfg["intermediate_size"], cfg["hidden_size"]))
        self.drop = nn.Dropout(cfg["hidden_dropout_prob"])

    def forward(self, x, attention_mask):
        x = self.ln1(x + self.drop(self.attention(x, attention_mask)))
        return self.ln2(x + self.drop(self.ffn(x)))


class CitationCrossEncoder(nn.Module):
    def __init__(self, **cfg):
        super().__init__()
        self.word = nn.Embedding(VOCAB, cfg["hidden_size"], padding_idx=PAD)
        self.position = nn.Embedding(cfg["max_position_embeddings"], cfg["hidden_size"])
        self.segment = nn.Embedding(2, cfg["hidden_size"])
        self.layers = nn.ModuleList(Layer(**cfg) for _ in range(cfg["num_hidden_layers"]))
        self.scorer = nn.Linear(cfg["hidden_size"], 1)

    def get_extended_attention_mask(self, attention_mask, dtype):
        ext = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - ext) * torch.finfo(dtype).min

    def forward(self, input_ids, token_type_ids, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word(input_ids) + self.position(pos) + self.segment(token_type_ids)
        ext = self.get_extended_attention_mask(attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(x, ext)
        return self.scorer(x[:, 0]).squeeze(-1)


def encode_pairs(context: list[int], candidates: list[list[int]], max_len: int = 96):
    rows, types = [], []
    for cand in candidates:
        ids = [CLS] + context + [SEP] + cand + [SEP]
        rows.append(ids[:max_len])
        types.append(([0] * (len(context) + 2) + [1] * (len(cand) + 1))[:max_len])
    width = max(map(len, rows))
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for i, (r, t) in enumerate(zip(rows, types)):
        input_ids[i, : len(r)] = torch.tensor(r)
        token_type_ids[i, : len(t)] = torch.tensor(t)
        attention_mask[i, : len(r)] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def listwise_loss(scores: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(scores[None], torch.zeros(1, dtype=torch.long, device=scores.device))


def fake_query(g: torch.Generator, n_cands: int = 4):
    ctx = torch.randint(4, VOCAB, (12,), generator=g).tolist()
    ctx[5] = CITE
    cands = [torch.randint(4, VOCAB, (int(torch.randint(8, 30, (1,), generator=g)),), generator=g).tolist()
             for _ in range(n_cands)]
    return encode_pairs(ctx, cands)


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = CitationCrossEncoder(**MODEL_ARGS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    for step in range(4):
        with accelerator.accumulate(model):
            loss = listwise_loss(model(**fake_query(g)))
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        scores = model(**fake_query(g))
    print(f"loss {loss.item():.4f} ranking {scores.argsort(descending=True).tolist()}")
