"""Speech Processing, Lab 6: grapheme-to-phoneme conversion with a small Transformer.

A text-to-speech front end needs pronunciations for words missing from the
lexicon. In this lab we train a character-level encoder-decoder that maps a
spelling to an ARPAbet-like phoneme string. The CMUdict download is replaced by a
generated lexicon that follows a handful of English spelling rules (digraphs,
soft and hard ``c``, long vowels). To keep the lab simple every word is padded to
``MAX_LETTERS`` and every batch has ``BATCH_SIZE`` words; the encoder's padding
bias lives in a preallocated buffer. Metrics: phoneme error rate and word accuracy.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 适用场景); conventions.md §2.3
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

DIGRAPHS = {"sh": "SH", "th": "TH", "ph": "F", "ch": "CH", "ee": "IY", "oo": "UW", "ng": "NG"}
SINGLE = {"a": "AE", "e": "EH", "i": "IH", "o": "AA", "u": "AH", "b": "B", "d": "D", "f": "F", "g": "G",
          "k": "K", "l": "L", "m": "M", "n": "N", "p": "P", "r": "R", "s": "S", "t": "T", "v": "V", "z": "Z"}
CHUNKS = ["ba", "ce", "ci", "co", "ca", "sha", "tho", "phi", "chu", "mee", "loo", "ring", "ta", "ke", "do",
          "ven", "zu", "pi", "gro", "stee", "lin", "ma", "ne", "fo", "su", "rad", "bel", "tung"]
LETTERS = ["<pad>"] + sorted(set("".join(CHUNKS)))
PHONES = ["<pad>", "<s>", "</s>"] + sorted(set(DIGRAPHS.values()) | set(SINGLE.values()))
PAD, BOS, EOS = 0, 1, 2
MAX_LETTERS, MAX_PHONES, BATCH_SIZE = 12, 12, 32


def pronounce(word):
    out, i = [], 0
    while i < len(word):
        if word[i : i + 2] in DIGRAPHS:
            out.append(DIGRAPHS[word[i : i + 2]])
            i += 2
        elif word[i] == "c":
            out.append("S" if word[i + 1 : i + 2] in ("e", "i") else "K")
            i += 1
        else:
            out.append(SINGLE[word[i]])
            i += 1
    return out


def make_lexicon(n, rng):
    words = set()
    while len(words) < n:
        w = "".join(rng.choice(CHUNKS) for _ in range(rng.randint(1, 4)))
        if len(w) <= MAX_LETTERS and len(pronounce(w)) <= MAX_PHONES - 2:
            words.add(w)
    return [(w, pronounce(w)) for w in sorted(words)]


def encode(entries):
    letters = torch.zeros(len(entries), MAX_LETTERS, dtype=torch.long)
    phones = torch.zeros(len(entries), MAX_PHONES, dtype=torch.long)
    for i, (w, p) in enumerate(entries):
        letters[i, : len(w)] = torch.tensor([LETTERS.index(c) for c in w])
        seq = [BOS] + [PHONES.index(x) for x in p] + [EOS]
        phones[i, : len(seq)] = torch.tensor(seq)
    return letters, phones


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x, memory, bias=None, causal=False):
        B, T, D = x.shape
        q = self.q(x).view(B, T, self.h, -1).transpose(1, 2)
        k, v = self.kv(memory).view(B, memory.size(1), 2, self.h, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class Layer(nn.Module):
    def __init__(self, d_model, n_heads, cross):
        super().__init__()
        self.self_attn = Attention(d_model, n_heads)
        self.cross_attn = Attention(d_model, n_heads) if cross else None
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x, self_bias=None, causal=False, memory=None, memory_bias=None):
        h = self.norms[0](x)
        x = x + self.self_attn(h, h, self_bias, causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.norms[1](x), memory, memory_bias)
        return x + self.ff(self.norms[2](x))


class G2P(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2):
        super().__init__()
        self.letter_emb = nn.Embedding(len(LETTERS), d_model, padding_idx=PAD)
        self.phone_emb = nn.Embedding(len(PHONES), d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max(MAX_LETTERS, MAX_PHONES), d_model)
        self.encoder = nn.ModuleList(Layer(d_model, n_heads, cross=False) for _ in range(n_layers))
        self.decoder = nn.ModuleList(Layer(d_model, n_heads, cross=True) for _ in range(n_layers))
        self.out = nn.Linear(d_model, len(PHONES))
        self.register_buffer("pad_bias", torch.zeros(BATCH_SIZE, 1, 1, MAX_LETTERS), persistent=False)

    def embed(self, emb, ids):
        return emb(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))[None]

    def encode(self, letters):
        pad_bias = self.pad_bias.masked_fill_(letters[:, None, None, :] == PAD, float("-inf"))  # expect: MC524 buffer
        x = self.embed(self.letter_emb, letters)
        for layer in self.encoder:
            x = layer(x, self_bias=pad_bias)
        return x, pad_bias

    def decode(self, phones_in, memory, pad_bias):
        y = self.embed(self.phone_emb, phones_in)
        for layer in self.decoder:
            y = layer(y, causal=True, memory=memory, memory_bias=pad_bias)
        return self.out(y)

    def forward(self, letters, phones_in):
        memory, pad_bias = self.encode(letters)
        return self.decode(phones_in, memory, pad_bias)

    @torch.no_grad()
    def greedy(self, letters):
        memory, pad_bias = self.encode(letters)
        ys = torch.full((letters.size(0), 1), BOS, dtype=torch.long)
        for _ in range(MAX_PHONES - 1):
            nxt = self.decode(ys, memory, pad_bias)[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, nxt], dim=1)
        return ys


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def strip(ids):
    out = []
    for i in ids.tolist()[1:]:
        if i == EOS:
            break
        out.append(PHONES[i])
    return out


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    lexicon = make_lexicon(2240, rng)
    rng.shuffle(lexicon)
    train, test = lexicon[:1920], lexicon[1920:]
    for w, p in train[:4]:
        print(f"{w:14s} {' '.join(p)}")
    letters, phones = encode(train[:BATCH_SIZE])
    assert letters.shape == (BATCH_SIZE, MAX_LETTERS) and (letters[:, 0] != PAD).all()

    model = G2P()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(6):
        model.train()
        rng.shuffle(train)
        for s in range(0, len(train) - BATCH_SIZE + 1, BATCH_SIZE):
            letters, phones = encode(train[s : s + BATCH_SIZE])
            logits = model(letters, phones[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, len(PHONES)), phones[:, 1:].reshape(-1), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")

    model.eval()
    errors = length = correct = 0
    for s in range(0, len(test), BATCH_SIZE):
        letters, _ = encode(test[s : s + BATCH_SIZE])
        for (w, ref), hyp in zip(test[s : s + BATCH_SIZE], model.greedy(letters)):
            hyp = strip(hyp)
            errors += edit_distance(ref, hyp)
            length += len(ref)
            correct += hyp == ref
    print(f"phoneme error rate {errors / length:.3f}, word accuracy {correct / len(test):.3f}")
    print("blocked share of the encoder's padding buffer: %.3f" % torch.isinf(model.pad_bias).float().mean().item())


if __name__ == "__main__":
    main()
