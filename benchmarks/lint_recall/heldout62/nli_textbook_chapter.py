"""Chapter 15, "Natural Language Inference", worked example: a small cross-encoder.

The chapter's running example, re-implemented for the book's companion repository
with PyTorch only: premise and hypothesis are packed into one sequence
``[CLS] premise [SEP] hypothesis [SEP]``, a tokenizer with the familiar
``tokenizer(premises, hypotheses, padding=True, return_tensors="pt")`` interface
produces ``input_ids``, ``token_type_ids`` and ``attention_mask``, and a two-layer
encoder written out in the model's ``forward`` (so the reader sees every tensor)
classifies the pair as entailment, neutral or contradiction. The SNLI download is
replaced by a generated corpus of the same flavour so the example runs offline.

Source: conventions.md §1 (direction cheat-sheet: SDPA and HF attention_mask rows), §5 item 1; rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14)
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SUBJECTS = {"man": "person", "woman": "person", "boy": "child", "girl": "child", "dog": "animal", "cat": "animal"}
ACTIONS = {
    "playing": {"guitar": "instrument", "piano": "instrument", "violin": "instrument"},
    "eating": {"apple": "fruit", "banana": "fruit", "pear": "fruit"},
    "chasing": {"ball": "toy", "kite": "toy", "frisbee": "toy"},
}
EXTRAS = ["in the park", "at night", "for a friend", "near the river"]
LABELS = ["entailment", "neutral", "contradiction"]


def make_pair(rng):
    subj = rng.choice(list(SUBJECTS))
    verb = rng.choice(list(ACTIONS))
    obj = rng.choice(list(ACTIONS[verb]))
    premise = f"a {subj} is {verb} a {obj}"
    label = rng.randrange(3)
    if label == 0:
        hypothesis = rng.choice([
            f"a {SUBJECTS[subj]} is {verb} a {obj}",
            f"a {subj} is {verb} a {ACTIONS[verb][obj]}",
            f"a {subj} is {verb}",
        ])
    elif label == 1:
        hypothesis = f"a {subj} is {verb} a {obj} {rng.choice(EXTRAS)}"
    else:
        other = rng.choice([o for o in ACTIONS[verb] if o != obj])
        hypothesis = rng.choice([f"a {subj} is sleeping", f"a {subj} is {verb} a {other}"])
    return premise, hypothesis, label


class PairTokenizer:
    def __init__(self, texts):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
        for t in texts:
            for w in t.split():
                self.vocab.setdefault(w, len(self.vocab))

    def __call__(self, premises, hypotheses, padding=True, return_tensors="pt"):
        rows = []
        for p, h in zip(premises, hypotheses):
            a = [self.vocab.get(w, 1) for w in p.split()]
            b = [self.vocab.get(w, 1) for w in h.split()]
            rows.append(([2] + a + [3] + b + [3], [0] * (len(a) + 2) + [1] * (len(b) + 1)))
        width = max(len(ids) for ids, _ in rows)
        out = {k: torch.zeros(len(rows), width, dtype=torch.long) for k in ("input_ids", "token_type_ids", "attention_mask")}
        for i, (ids, types) in enumerate(rows):
            out["input_ids"][i, : len(ids)] = torch.tensor(ids)
            out["token_type_ids"][i, : len(ids)] = torch.tensor(types)
            out["attention_mask"][i, : len(ids)] = 1
        return out


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))


class CrossEncoder(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, max_len=32):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.seg = nn.Embedding(2, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.classifier = nn.Linear(2 * d_model, len(LABELS))

    def forward(self, input_ids, token_type_ids, attention_mask):
        B, T = input_ids.shape
        x = self.tok(input_ids) + self.seg(token_type_ids) + self.pos(torch.arange(T, device=input_ids.device))[None]
        pad = attention_mask == 0
        for layer in self.layers:
            h = layer.norm1(x)
            q, k, v = layer.qkv(h).view(B, T, 3, layer.n_heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])  # expect: MC511 direction
            x = x + layer.out(a.transpose(1, 2).reshape(B, T, -1))
            x = x + layer.ffn(layer.norm2(x))
        x = self.norm(x)
        mean = x.masked_fill(pad[..., None], 0.0).sum(1) / (~pad).sum(1, keepdim=True)
        return self.classifier(torch.cat([x[:, 0], mean], dim=-1))


def evaluate(model, tokenizer, data):
    model.eval()
    enc = tokenizer([p for p, _, _ in data], [h for _, h, _ in data], padding=True, return_tensors="pt")
    labels = torch.tensor([y for _, _, y in data])
    with torch.no_grad():
        pred = model(**enc).argmax(-1)
    return (pred == labels).float().mean().item()


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train = [make_pair(rng) for _ in range(3000)]
    test = [make_pair(rng) for _ in range(300)]
    for p, h, y in train[:4]:
        print(f"{LABELS[y]:13s} | {p} | {h}")
    tokenizer = PairTokenizer([p for p, _, _ in train] + [h for _, h, _ in train])
    enc = tokenizer([train[0][0]], [train[0][1]], padding=True, return_tensors="pt")
    print({k: v.tolist() for k, v in enc.items()})
    assert enc["attention_mask"].sum() == enc["input_ids"].ne(0).sum()

    model = CrossEncoder(len(tokenizer.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for epoch in range(4):
        model.train()
        rng.shuffle(train)
        for s in range(0, len(train), 64):
            chunk = train[s : s + 64]
            enc = tokenizer([p for p, _, _ in chunk], [h for _, h, _ in chunk], padding=True, return_tensors="pt")
            loss = F.cross_entropy(model(**enc), torch.tensor([y for _, _, y in chunk]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}  test accuracy {evaluate(model, tokenizer, test):.3f}")

    premise = "a girl is eating a pear"
    for hyp in ["a child is eating a fruit", "a girl is sleeping", "a girl is eating a pear at night"]:
        enc = tokenizer([premise], [hyp], padding=True, return_tensors="pt")
        print(f"{premise} => {hyp}: {LABELS[model(**enc).argmax(-1).item()]}")


if __name__ == "__main__":
    main()
