"""Kana-to-kanji conversion for an input method, with a low-latency windowed mode.

A PyTorch port of soskek/attention_is_all_you_need (Chainer): `-1` pads every block as
Chainer's `EmbedID(ignore_label=-1)` and `F.softmax_cross_entropy` expect, masks are made
from `block >= 0`, `MultiHeadAttention` keeps the original's `F.where(mask, A, -inf)`, and
the decoder's history mask is kept as an additive buffer built once in `__init__` (the port's
stand-in for `make_history_mask`, with a `distance` buffer beside it). The input method calls
`translate(..., window=k)` while the user is typing to limit the decoder to its last k
outputs. Homophones (はし: 橋 / 箸, かみ: 紙 / 髪, あめ: 雨 / 飴) are resolved by the verb.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 张量共享内存风险)
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

NOUNS = {"はし": {"わたる": "橋", "たべる": "箸"}, "かみ": {"かく": "紙", "きる": "髪"}, "あめ": {"ふる": "雨", "なめる": "飴"}}
VERBS = {"わたる": "渡る", "たべる": "食べる", "かく": "書く", "きる": "切る", "ふる": "降る", "なめる": "舐める"}
PARTICLES = ["を", "が", "で"]
SOURCE_CHARS = sorted({c for w in list(NOUNS) + list(VERBS) + PARTICLES for c in w})
TARGET_CHARS = ["<bos>", "<eos>"] + sorted({c for w in list(VERBS.values()) + PARTICLES for c in w} | {k for v in NOUNS.values() for k in v.values()})


def make_pair(rng):
    noun = rng.choice(list(NOUNS))
    verb = rng.choice(list(NOUNS[noun]))
    particle = rng.choice(PARTICLES)
    return noun + particle + verb, NOUNS[noun][verb] + particle + VERBS[verb]


def to_block(seqs, vocab, bos_eos=False):
    ids = [[vocab.index(c) for c in s] for s in seqs]
    if bos_eos:
        ids = [[0] + i + [1] for i in ids]
    block = torch.full((len(ids), max(map(len, ids))), -1, dtype=torch.long)
    for b, i in enumerate(ids):
        block[b, :len(i)] = torch.tensor(i)
    return block


class MultiHeadAttention(nn.Module):
    def __init__(self, n_units, h=4):
        super().__init__()
        self.h, self.scale_score = h, 1.0 / math.sqrt(n_units // h)
        self.W_Q, self.W_K, self.W_V = (nn.Linear(n_units, n_units, bias=False) for _ in range(3))
        self.finishing_linear_layer = nn.Linear(n_units, n_units, bias=False)

    def forward(self, x, z, key_keep, bias=None):
        b, n, units = x.shape
        Q = self.W_Q(x).view(b, n, self.h, -1).transpose(1, 2)
        K = self.W_K(z).view(b, z.shape[1], self.h, -1).transpose(1, 2)
        V = self.W_V(z).view(b, z.shape[1], self.h, -1).transpose(1, 2)
        batch_A = Q @ K.transpose(-1, -2) * self.scale_score
        if bias is not None:
            batch_A = batch_A + bias
        batch_A = batch_A.masked_fill(~key_keep[:, None, None, :], float("-inf"))
        C = torch.softmax(batch_A, dim=-1) @ V
        return self.finishing_linear_layer(C.transpose(1, 2).reshape(b, n, units))


class LayerBlock(nn.Module):
    def __init__(self, n_units, decoder):
        super().__init__()
        self.self_attention = MultiHeadAttention(n_units)
        self.source_attention = MultiHeadAttention(n_units) if decoder else None
        self.feed_forward = nn.Sequential(nn.Linear(n_units, 4 * n_units), nn.ReLU(), nn.Linear(4 * n_units, n_units))
        self.ln_1, self.ln_2, self.ln_3 = nn.LayerNorm(n_units), nn.LayerNorm(n_units), nn.LayerNorm(n_units)

    def forward(self, e, keep, bias=None, s=None, source_keep=None):
        e = self.ln_1(e + self.self_attention(e, e, keep, bias))
        if self.source_attention is not None:
            e = self.ln_2(e + self.source_attention(e, s, source_keep))
        return self.ln_3(e + self.feed_forward(e))


class Transformer(nn.Module):
    def __init__(self, n_units=64, n_layers=2, max_length=16):
        super().__init__()
        self.embed_x = nn.Embedding(len(SOURCE_CHARS), n_units)
        self.embed_y = nn.Embedding(len(TARGET_CHARS), n_units)
        self.position = nn.Parameter(torch.randn(max_length, n_units) * 0.1)
        self.encoder = nn.ModuleList(LayerBlock(n_units, False) for _ in range(n_layers))
        self.decoder = nn.ModuleList(LayerBlock(n_units, True) for _ in range(n_layers))
        self.output = nn.Linear(n_units, len(TARGET_CHARS))
        arange = torch.arange(max_length)
        self.register_buffer("distance", arange[:, None] - arange[None, :])
        self.register_buffer("history_bias", torch.zeros(max_length, max_length).masked_fill(arange[None, :] > arange[:, None], float("-inf")))

    def encode(self, x_block):
        x_keep = x_block >= 0
        e = self.embed_x(x_block.clamp(min=0)) + self.position[:x_block.shape[1]]
        for layer in self.encoder:
            e = layer(e, x_keep)
        return e, x_keep

    def forward(self, x_block, y_in_block, window=None):
        s, x_keep = self.encode(x_block)
        n = y_in_block.shape[1]
        history_bias = self.history_bias
        if window is not None:
            history_bias.masked_fill_(self.distance >= window, float("-inf"))  # expect: MC524 alias
        e = self.embed_y(y_in_block.clamp(min=0)) + self.position[:n]
        for layer in self.decoder:
            e = layer(e, y_in_block >= 0, history_bias[:n, :n], s, x_keep)
        return self.output(e)

    @torch.no_grad()
    def translate(self, x_block, max_length=8, window=None):
        ys = torch.zeros(x_block.shape[0], 1, dtype=torch.long)
        for _ in range(max_length):
            logits = self.forward(x_block, ys, window=window)
            ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ["".join(TARGET_CHARS[i] for i in row[1:].tolist()).split("<eos>")[0] for row in ys]


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    model = Transformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    for step in range(200):
        kana, kanji = zip(*[make_pair(rng) for _ in range(32)])
        x_block, y_block = to_block(kana, SOURCE_CHARS), to_block(kanji, TARGET_CHARS, bos_eos=True)
        logits = model(x_block, y_block[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), y_block[:, 1:], ignore_index=-1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    kana, kanji = zip(*[make_pair(rng) for _ in range(100)])
    x_block = to_block(kana, SOURCE_CHARS)
    before = sum(a == b for a, b in zip(model.translate(x_block), kanji))
    typing = model.translate(to_block(["はしを"], SOURCE_CHARS), max_length=3, window=2)
    after = sum(a == b for a, b in zip(model.translate(x_block), kanji))
    print("loss %.3f  exact conversions %d / 100, after a windowed call %s: %d / 100" % (loss.item(), before, typing, after))
    print("finite history entries in the saved state:", torch.isfinite(model.state_dict()["history_bias"]).sum().item())


if __name__ == "__main__":
    main()
