"""Lecture 11 demo: "Can a Transformer learn to add?", encoder-decoder from scratch.

Code shown in the lecture, cleaned up for the course website. The source is an
addition problem written as characters (``"382+47"``), the target is the sum with
its digits reversed (``"924"`` for 429, the order in which a person carries), and
both sides are padded to the longest example of the batch. Everything is written
by hand in small functions: embeddings, the attention function with an additive
bias, encoder and decoder layers, a collate function, a training loop, and greedy
decoding for the accuracy table at the end of the lecture.

Source: conventions.md §1 (HF 4.x AttentionMaskConverter and Keras rows); huggingface/transformers#32113 (conventions.md §4.1), huggingface/transformers#32195 (§3 item 25)
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

CHARS = ["<pad>", "<s>", "</s>", "+"] + [str(d) for d in range(10)]
C2I = {c: i for i, c in enumerate(CHARS)}
PAD, BOS, EOS = 0, 1, 2
MAX_DIGITS = 4
NEG = -1e4


def make_problem(rng):
    a = rng.randint(0, 10 ** rng.randint(1, MAX_DIGITS) - 1)
    b = rng.randint(0, 10 ** rng.randint(1, MAX_DIGITS) - 1)
    return f"{a}+{b}", str(a + b)[::-1]


def encode(text):
    return [C2I[c] for c in text]


def collate(problems):
    srcs = [encode(s) for s, _ in problems]
    tgts = [[BOS] + encode(t) + [EOS] for _, t in problems]
    src = torch.full((len(srcs), max(map(len, srcs))), PAD, dtype=torch.long)
    tgt = torch.full((len(tgts), max(map(len, tgts))), PAD, dtype=torch.long)
    for i, (s, t) in enumerate(zip(srcs, tgts)):
        src[i, : len(s)] = torch.tensor(s)
        tgt[i, : len(t)] = torch.tensor(t)
    src_keep = (src != PAD).long()
    src_bias = (1 - src_keep[:, None, None, :]) * NEG
    return src, tgt, src_bias


def causal_bias(n, device=None):
    return torch.triu(torch.full((n, n), NEG, device=device), diagonal=1)


def attention(q, k, v, bias):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return F.softmax(scores + bias, dim=-1) @ v


class MultiHead(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x, memory, bias):
        B, T, D = x.shape
        q = self.q(x).view(B, T, self.h, -1).transpose(1, 2)
        k, v = self.kv(memory).view(B, memory.size(1), 2, self.h, -1).permute(2, 0, 3, 1, 4)
        return self.o(attention(q, k, v, bias).transpose(1, 2).reshape(B, T, D))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = MultiHead(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, src_bias):
        x = self.n1(x + self.attn(x, x, src_bias))
        return self.n2(x + self.ff(x))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.self_attn = MultiHead(d_model, n_heads)
        self.cross_attn = MultiHead(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.n1, self.n2, self.n3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, y, memory, tgt_bias, src_bias):
        y = self.n1(y + self.self_attn(y, y, tgt_bias))
        y = self.n2(y + self.cross_attn(y, memory, src_bias))
        return self.n3(y + self.ff(y))


class Adder(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2, max_len=16):
        super().__init__()
        self.emb = nn.Embedding(len(CHARS), d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, n_heads) for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, n_heads) for _ in range(n_layers))
        self.out = nn.Linear(d_model, len(CHARS))

    def embed(self, ids):
        return self.emb(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))[None]

    def encode(self, src, src_bias):
        x = self.embed(src)
        for layer in self.encoder:
            x = layer(x, src_bias)
        return x

    def decode(self, tgt_in, memory, src_bias):
        y = self.embed(tgt_in)
        tgt_bias = causal_bias(tgt_in.size(1), tgt_in.device)
        for layer in self.decoder:
            y = layer(y, memory, tgt_bias, src_bias)
        return self.out(y)

    def forward(self, src, tgt_in, src_bias):
        return self.decode(tgt_in, self.encode(src, src_bias), src_bias)


@torch.no_grad()
def greedy_decode(model, src, max_out=MAX_DIGITS + 2):
    model.eval()
    src_keep = src != PAD
    src_bias = (1 - src_keep[:, None, None, :]) * NEG  # expect: MC512 subtract
    memory = model.encode(src, src_bias)
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long)
    for _ in range(max_out):
        nxt = model.decode(ys, memory, src_bias)[:, -1].argmax(-1, keepdim=True)
        ys = torch.cat([ys, nxt], dim=1)
    return ys[:, 1:]


def to_text(ids):
    out = []
    for i in ids.tolist():
        if i == EOS:
            break
        out.append(CHARS[i])
    return "".join(out)


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    print("examples:", [make_problem(rng) for _ in range(4)])
    src, tgt, src_bias = collate([make_problem(rng) for _ in range(2)])
    print("src", src.tolist(), "\nbias row 0", src_bias[0, 0, 0].tolist())
    print("causal bias:\n", causal_bias(4))
    assert src_bias.shape == (2, 1, 1, src.size(1))

    model = Adder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(500):
        model.train()
        src, tgt, src_bias = collate([make_problem(rng) for _ in range(64)])
        logits = model(src, tgt[:, :-1], src_bias)
        loss = F.cross_entropy(logits.reshape(-1, len(CHARS)), tgt[:, 1:].reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")

    test = [make_problem(random.Random(1000 + i)) for i in range(300)]
    src, _, _ = collate(test)
    pred = greedy_decode(model, src)
    correct = sum(to_text(p) == t for p, (_, t) in zip(pred, test))
    print(f"exact-match accuracy on 300 new problems: {correct / len(test):.3f}")
    for p, (s, t) in list(zip(pred, test))[:5]:
        print(f"  {s:>10s} = {t[::-1]:>6s}   model says {to_text(p)[::-1]}")


if __name__ == "__main__":
    main()
