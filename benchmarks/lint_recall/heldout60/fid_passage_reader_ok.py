"""Fusion-in-Decoder reader for open-domain QA over many retrieved passages, sharded across ranks.

Each rank encodes its share of the question-passage pairs; the encodings and their masks are
all-gathered and concatenated so that the decoder reads every passage at once (FiD). With
torch.distributed not initialised the gather is the identity and the script runs in one process.

Source: conventions.md §1 (direction cheat-sheet; nn.MultiheadAttention and HF attention_mask rows), §5 item 1; seed self_attention_mask_guide.txt §2, §7 Q1
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


class WordTokenizer:
    def __init__(self, corpus):
        words = sorted({w for text in corpus for w in text.split()})
        self.vocab = {w: i + 3 for i, w in enumerate(words)}

    def __call__(self, texts, max_length):
        ids = [[self.vocab[w] for w in t.split()][:max_length] for t in texts]
        input_ids = torch.full((len(ids), max_length), PAD, dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row)
        return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


def shard_passages(passages, rank, world_size):
    per_rank = (len(passages) + world_size - 1) // world_size
    return passages[rank * per_rank: (rank + 1) * per_rank]


def all_gather_cat(t, dim):
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=dim)


class ReaderDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, y, memory, encoder_attention_mask):
        t = y.shape[1]
        future = torch.ones(t, t, dtype=torch.bool, device=y.device).triu(1)
        h = self.norms[0](y)
        y = y + self.self_attn(h, h, h, attn_mask=future)[0]
        h = self.norms[1](y)
        y = y + self.cross_attn(h, memory, memory, key_padding_mask=encoder_attention_mask == 0)[0]
        return y + self.ff(self.norms[2](y))


class FiDReader(nn.Module):
    def __init__(self, vocab_size, d_model=32, nhead=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        enc_layer = nn.TransformerEncoderLayer(d_model, nhead, 4 * d_model, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, layers, enable_nested_tensor=False)
        self.decoder = nn.ModuleList(ReaderDecoderLayer(d_model, nhead) for _ in range(layers))
        self.lm_head = nn.Linear(d_model, vocab_size)

    def encode(self, input_ids, attention_mask):
        b, p, length = input_ids.shape
        flat_ids = input_ids.view(b * p, length)
        pad = attention_mask.view(b * p, length) == 0
        hidden = self.encoder(self.embed(flat_ids), src_key_padding_mask=pad)
        hidden = all_gather_cat(hidden.view(b, p, length, -1), dim=1)
        mask = all_gather_cat(attention_mask, dim=1)
        return hidden.flatten(1, 2), mask.flatten(1, 2)

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        memory, memory_mask = self.encode(input_ids, attention_mask)
        y = self.embed(decoder_input_ids)
        for layer in self.decoder:
            y = layer(y, memory, memory_mask)
        return self.lm_head(y)


def make_batch(tok, examples, rank, world_size, max_length=12):
    ids, masks, targets = [], [], []
    for question, passages, answer in examples:
        local = shard_passages(passages, rank, world_size)
        enc = tok([f"question: {question} context: {p}" for p in local], max_length)
        ids.append(enc["input_ids"])
        masks.append(enc["attention_mask"])
        targets.append([BOS] + [tok.vocab[w] for w in answer.split()] + [EOS])
    width = max(len(t) for t in targets)
    labels = torch.full((len(targets), width), PAD, dtype=torch.long)
    for i, t in enumerate(targets):
        labels[i, : len(t)] = torch.tensor(t)
    return {"input_ids": torch.stack(ids), "attention_mask": torch.stack(masks), "labels": labels}


def toy_examples(n, passages_per_q=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    people = ["ada", "bo", "cy", "dee", "eli", "fay", "gus", "hal", "ivy", "jo"]
    cities = ["paris", "rome", "oslo", "lima", "cairo", "delhi", "quito", "seoul"]
    out = []
    for _ in range(n):
        who = torch.randperm(len(people), generator=g)[:passages_per_q].tolist()
        where = torch.randint(len(cities), (passages_per_q,), generator=g).tolist()
        passages = [f"{people[w]} lives in {cities[c]}" for w, c in zip(who, where)]
        asked = int(torch.randint(passages_per_q, (1,), generator=g))
        out.append((f"where does {people[who[asked]]} live", passages, cities[where[asked]]))
    return out


def main(steps=200, seed=0):
    torch.manual_seed(seed)
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    train_set, test_set = toy_examples(256, seed=seed), toy_examples(64, seed=seed + 1)
    tok = WordTokenizer([q + " " + " ".join(ps) + " " + a + " question: context:" for q, ps, a in train_set + test_set])
    model = FiDReader(len(tok.vocab) + 3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(steps):
        batch = make_batch(tok, [train_set[(step * 16 + i) % len(train_set)] for i in range(16)], rank, world_size)
        logits = model(batch["input_ids"], batch["attention_mask"], batch["labels"][:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), batch["labels"][:, 1:], ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        batch = make_batch(tok, test_set, rank, world_size)
        logits = model(batch["input_ids"], batch["attention_mask"], batch["labels"][:, :1])
        exact = (logits[:, -1].argmax(-1) == batch["labels"][:, 1]).float().mean().item()
    return loss.item(), exact


if __name__ == "__main__":
    print("loss %.3f exact match %.3f" % main())
