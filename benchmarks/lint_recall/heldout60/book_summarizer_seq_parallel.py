"""Encoder-decoder summariser for book-length inputs with a sequence-parallel local-attention encoder.

The source (a chapter of thousands of tokens) is split into contiguous blocks, one per rank;
every rank encodes its block with self-attention local to the block (LongT5-style local
attention), and the block encodings are all-gathered so that the decoder cross-attends to the
whole chapter. With torch.distributed not initialised the blocks are encoded in a loop.

Source: conventions.md §1 (HF attention_mask row), §2.4
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


def encoder_ranks(simulated):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated)), simulated


def gather_blocks(blocks, world):
    if len(blocks) == world:
        return torch.cat(blocks, dim=1)
    parts = [torch.empty_like(blocks[0]) for _ in range(world)]
    dist.all_gather(parts, blocks[0].contiguous())
    return torch.cat(parts, dim=1)


def tokenize(docs, vocab, max_len, multiple):
    ids = [[vocab.setdefault(w, len(vocab)) for w in d.split()][:max_len] for d in docs]
    width = -(-max(len(i) for i in ids) // multiple) * multiple
    input_ids = torch.full((len(ids), width), PAD, dtype=torch.long)
    for r, row in enumerate(ids):
        input_ids[r, : len(row)] = torch.tensor(row)
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def forward(self, x, memory, keep=None, pad=None, causal=False):
        q, k, v = self.split(self.q(x)), self.split(self.k(memory)), self.split(self.v(memory))
        if pad is None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
            y = scores.softmax(-1) @ v
        return self.o(y.transpose(1, 2).reshape(x.shape))


class Summarizer(nn.Module):
    def __init__(self, vocab_size, dim=32, heads=4, sp_size=2):
        super().__init__()
        self.sp_size = sp_size
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.pos = nn.Embedding(512, dim)
        self.enc_attn, self.dec_self, self.dec_cross = (Attention(dim, heads) for _ in range(3))
        self.enc_ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))
        self.lm_head = nn.Linear(dim, vocab_size)

    def encode(self, input_ids, attention_mask):
        ranks, world = encoder_ranks(self.sp_size)
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        block = input_ids.shape[1] // world
        outs = []
        for r in ranks:
            xb = x[:, r * block:(r + 1) * block]
            keep = attention_mask[:, r * block:(r + 1) * block].bool()[:, None, None, :]
            h = xb + self.enc_attn(self.norms[0](xb), self.norms[0](xb), keep=keep)
            outs.append(h + self.enc_ff(self.norms[1](h)))
        return gather_blocks(outs, world)

    def forward(self, batch, decoder_input_ids):
        memory = self.encode(batch["input_ids"], batch["attention_mask"])
        source_pad = ~batch["attention_mask"]  # expect: MC518 tokenizer
        y = self.embed(decoder_input_ids) + self.pos(torch.arange(decoder_input_ids.shape[1]))
        y = y + self.dec_self(self.norms[2](y), self.norms[2](y), causal=True)
        y = y + self.dec_cross(self.norms[3](y), memory, pad=source_pad)
        return self.lm_head(y)


def synthetic_chapters(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    names = ["anna", "boris", "clara", "dmitri", "elena", "fyodor", "galina", "ivan"]
    places = ["moscow", "the estate", "the station", "the ball", "the front", "the village"]
    out = []
    for _ in range(n):
        hero, place = names[int(torch.randint(8, (1,), generator=g))], places[int(torch.randint(6, (1,), generator=g))]
        filler = " ".join(["and the days passed slowly"] * int(torch.randint(1, 5, (1,), generator=g)))
        out.append((f"in this chapter {hero} travels to {place} {filler} and {hero} stays at {place}", f"{hero} goes to {place}"))
    return out


def train(steps=120, seed=0):
    torch.manual_seed(seed)
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS}
    data = synthetic_chapters(256, seed)
    for text, summary in data:
        tokenize([text + " " + summary], vocab, 512, 1)
    model = Summarizer(len(vocab) + 8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(steps):
        chunk = data[(step * 16) % 256:][:16]
        batch = tokenize([t for t, _ in chunk], vocab, 512, model.sp_size)
        target = tokenize([s for _, s in chunk], vocab, 16, 1)["input_ids"]
        target = F.pad(F.pad(target, (1, 0), value=BOS), (0, 1), value=PAD)
        logits = model(batch, target[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), target[:, 1:], ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    print("loss %.3f" % train())
