"""Postal address parsing (house number, street, unit, city, state, postcode) for a C++ geocoder.

The tagger is written to be scripted: typed forward, `Final` constants, a scripted mask helper
and an exported `tag` method that the geocoder calls on batches of token ids. `export()` writes
`address_parser.pt` with `torch.jit.script(model).save(...)` after a short training run; the C++
side loads it with `torch::jit::load` and tokenizes with the same word vocabulary.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md section 3 item 21).
"""

import math
import random
from typing import Final, List

import torch
import torch.nn as nn
import torch.nn.functional as F

TAGS = ["O", "NUMBER", "STREET", "UNIT", "CITY", "STATE", "POSTCODE"]
STREETS = ["oak", "maple", "main", "pine", "cedar", "elm", "lake", "hill", "park", "washington"]
SUFFIXES = ["street", "st", "avenue", "ave", "road", "rd", "lane", "drive"]
CITIES = [["springfield"], ["salem"], ["fair", "haven"], ["glen", "burnie"], ["madison"], ["san", "jose"]]
STATES = ["il", "or", "nj", "md", "wi", "ca"]


def synth_address(rng):
    words, tags = [str(rng.randint(1, 9999))], ["NUMBER"]
    street = [rng.choice(STREETS)] + ([rng.choice(STREETS)] if rng.random() < 0.2 else []) + [rng.choice(SUFFIXES)]
    words += street
    tags += ["STREET"] * len(street)
    if rng.random() < 0.4:
        words += [rng.choice(["apt", "unit", "suite"]), str(rng.randint(1, 40))]
        tags += ["UNIT", "UNIT"]
    city = rng.choice(CITIES)
    words += city + [rng.choice(STATES), f"{rng.randint(10000, 99999)}"]
    tags += ["CITY"] * len(city) + ["STATE", "POSTCODE"]
    return words, tags


class Vocab:
    def __init__(self):
        words = STREETS + SUFFIXES + [w for c in CITIES for w in c] + STATES + ["apt", "unit", "suite"]
        self.itos = ["<pad>", "<unk>", "<num>", "<zip>"] + sorted(set(words))
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def encode(self, words: List[str]) -> List[int]:
        return [3 if w.isdigit() and len(w) == 5 else 2 if w.isdigit() else self.stoi.get(w, 1) for w in words]


@torch.jit.script
def key_padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id).unsqueeze(1).unsqueeze(2)


class AddressAttention(nn.Module):
    n_heads: Final[int]

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.n_heads)
        scores = scores.masked_fill(mask == 0, float("-inf"))
        ctx = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.out(ctx.transpose(1, 2).reshape(b, t, d))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.attn = AddressAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ff(x))


class AddressTagger(nn.Module):
    pad_id: Final[int]
    max_len: Final[int]

    def __init__(self, vocab_size: int, n_tags: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2, max_len: int = 32):
        super().__init__()
        self.pad_id = 0
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads) for _ in range(n_layers)])
        self.classifier = nn.Linear(d_model, n_tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = key_padding_mask(tokens, self.pad_id)
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(x)

    @torch.jit.export
    def tag(self, tokens: torch.Tensor) -> torch.Tensor:
        pred = self.forward(tokens).argmax(dim=-1)
        return pred.masked_fill(tokens == self.pad_id, -1)


def make_batch(vocab, examples):
    width = max(len(w) for w, _ in examples)
    tokens = torch.zeros(len(examples), width, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (words, tags) in enumerate(examples):
        tokens[i, : len(words)] = torch.tensor(vocab.encode(words))
        labels[i, : len(tags)] = torch.tensor([TAGS.index(t) for t in tags])
    return tokens, labels


def train(steps=400, batch_size=32, seed=0):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    vocab = Vocab()
    model = AddressTagger(len(vocab.itos), len(TAGS))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(steps):
        tokens, labels = make_batch(vocab, [synth_address(rng) for _ in range(batch_size)])
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    return vocab, model


def export(path="address_parser.pt"):
    vocab, model = train()
    model.eval()
    scripted = torch.jit.script(model)
    rng = random.Random(1)
    tokens, labels = make_batch(vocab, [synth_address(rng) for _ in range(64)])
    pred = scripted.tag(tokens)
    print(f"token accuracy {(pred == labels)[labels >= 0].float().mean().item():.3f}")
    scripted.save(path)


if __name__ == "__main__":
    export()
