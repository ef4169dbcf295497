"""Retrieval-augmented answering with Parallel Context Windows (Ratner et al.,
2023).

Retrieved passages are laid side by side instead of one after another: each
passage is its own window and reuses the positions 0..len-1, so the prompt
never needs positions past the longest passage.  The question and the answer
tokens come after the windows and read all of them.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask); conventions.md section 2.3.
"""
import math
import re
import zlib
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 512
BOS, EOS = 1, 2

CORPUS = [
    "The Eiffel Tower was finished in 1889 for the World's Fair in Paris.",
    "Gustave Eiffel's company designed and built the tower.",
    "The Statue of Liberty was a gift from France to the United States.",
    "Paris is the capital of France and sits on the Seine.",
    "The tower is 330 metres tall including its antennas.",
]


def tokenize(text):
    return [3 + zlib.crc32(w.encode()) % (VOCAB - 3) for w in re.findall(r"\w+|[^\w\s]", text.lower())]


def retrieve(question, corpus, k=3):
    q = Counter(re.findall(r"\w+", question.lower()))
    scored = []
    for doc in corpus:
        d = Counter(re.findall(r"\w+", doc.lower()))
        overlap = sum(min(q[w], d[w]) for w in q)
        scored.append((overlap / math.sqrt(1 + sum(d.values())), doc))
    return [doc for _, doc in sorted(scored, reverse=True)[:k]]


def pcw_attention_bias(window_lengths, n_task):
    n_ctx = sum(window_lengths)
    total = n_ctx + n_task
    bias = torch.zeros(total, total)
    start = 0
    for length in window_lengths:
        bias[start:start + length, start:start + length] = 0.0  # expect: MC504 windows
        start += length
    bias[n_ctx:, :] = 1.0
    bias[bias == 0] = float("-inf")  # also: MC504 windows
    bias[bias == 1] = 0.0
    causal = torch.triu(torch.full((total, total), float("-inf")), diagonal=1)
    return bias + causal


def pcw_position_ids(window_lengths, n_task):
    positions = [torch.arange(n) for n in window_lengths]
    offset = max(window_lengths)
    positions.append(torch.arange(offset, offset + n_task))
    return torch.cat(positions)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x, bias, layer_past=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if bias is not None:
            att = att + bias
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), (k, v)


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, bias, layer_past=None):
        a, present = self.attn(self.ln_1(x), bias, layer_past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class GPT(nn.Module):
    def __init__(self, n_layer=2, n_embd=64, n_head=4, block_size=256):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, position_ids, bias=None, past=None):
        x = self.wte(idx) + self.wpe(position_ids)[None]
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, bias, None if past is None else past[i])
            presents.append(present)
        return self.lm_head(self.ln_f(x)), presents


class PCWAnswerer:
    def __init__(self, model, corpus, k=3):
        self.model, self.corpus, self.k = model, corpus, k

    def build_prompt(self, question):
        passages = retrieve(question, self.corpus, self.k)
        windows = [[BOS] + tokenize(p) for p in passages]
        task = tokenize("question : " + question + " answer :")
        ids = torch.tensor([t for w in windows for t in w] + task)
        lengths = [len(w) for w in windows]
        return ids, lengths, len(task)

    @torch.no_grad()
    def answer(self, question, max_new_tokens=8):
        ids, lengths, n_task = self.build_prompt(question)
        bias = pcw_attention_bias(lengths, n_task)
        position_ids = pcw_position_ids(lengths, n_task)
        logits, past = self.model(ids[None], position_ids, bias, None)
        next_pos = int(position_ids[-1]) + 1
        generated = []
        for _ in range(max_new_tokens):
            token = int(logits[0, -1].argmax())
            generated.append(token)
            if token == EOS:
                break
            logits, past = self.model(torch.tensor([[token]]), torch.tensor([next_pos]), None, past)
            next_pos += 1
        return generated, logits


if __name__ == "__main__":
    torch.manual_seed(0)
    answerer = PCWAnswerer(GPT().eval(), CORPUS, k=3)
    for q in ["When was the Eiffel Tower finished?", "How tall is the tower?"]:
        tokens, last_logits = answerer.answer(q)
        print(q, tokens, "finite:", bool(torch.isfinite(last_logits).all()))
