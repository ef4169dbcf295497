"""Health Informatics 540, Lab 7: a BEHRT-style transformer on electronic health records.

Following the BEHRT paper (Li et al., 2020) we represent a patient as the sequence of
diagnosis codes of their visits, ``[CLS] codes of visit 1 [SEP] codes of visit 2
[SEP] ...``, and add an age embedding and an alternating visit segment to each code
embedding. The lab uses a synthetic cohort (no real patient data leaves the
hospital): the task is to predict heart failure at the next visit. Students write
the embeddings, the eager self-attention and the classification head themselves.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (§3 item 25), conventions.md §2.9, §5 item 7
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIAL = ["[PAD]", "[CLS]", "[SEP]"]
PAD, CLS, SEP = 0, 1, 2
CODES = ["I10", "E11", "E78", "J45", "M54", "K21", "F32", "N18", "I48", "J44",
         "E66", "G47", "R51", "Z00", "H52", "L40", "I25", "D64", "E03", "K58"]
RISK = {"I10": 0.8, "E11": 0.7, "N18": 0.9, "I48": 1.0, "I25": 1.1, "E66": 0.4}
VOCAB = SPECIAL + CODES
CODE_ID = {c: i for i, c in enumerate(VOCAB)}
MAX_AGE = 100


def make_patient(rng):
    age = rng.randint(40, 80)
    visits, risk = [], -4.0
    for _ in range(rng.randint(2, 7)):
        visit = rng.sample(CODES, rng.randint(1, 3))
        risk += sum(RISK.get(c, 0.0) for c in visit)
        visits.append((age, visit))
        age += rng.randint(0, 2)
    label = int(rng.random() < 1.0 / (1.0 + math.exp(-risk)))
    return visits, label


def encode(patients):
    seqs = []
    for visits, _ in patients:
        codes, ages, segs = [CLS], [visits[0][0]], [0]
        for v, (age, visit) in enumerate(visits):
            for c in visit + ["[SEP]"]:
                codes.append(CODE_ID[c])
                ages.append(age)
                segs.append(v % 2)
        seqs.append((codes, ages, segs))
    width = max(len(c) for c, _, _ in seqs)
    out = torch.zeros(3, len(seqs), width, dtype=torch.long)
    for i, seq in enumerate(seqs):
        for j, row in enumerate(seq):
            out[j, i, : len(row)] = torch.tensor(row)
    labels = torch.tensor([float(y) for _, y in patients])
    return out[0], out[1], out[2], labels


class BehrtEmbeddings(nn.Module):
    def __init__(self, d_model, dropout):
        super().__init__()
        self.code = nn.Embedding(len(VOCAB), d_model, padding_idx=PAD)
        self.age = nn.Embedding(MAX_AGE + 1, d_model)
        self.segment = nn.Embedding(2, d_model)
        self.position = nn.Embedding(64, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, codes, ages, segments):
        pos = torch.arange(codes.size(1), device=codes.device)[None]
        h = self.code(codes) + self.age(ages) + self.segment(segments) + self.position(pos)
        return self.drop(self.norm(h))


class BehrtLayer(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.dense = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_head).permute(0, 2, 1, 3)

    def forward(self, h, attn_bias):
        q, k, v = self.heads(self.query(h)), self.heads(self.key(h)), self.heads(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d_head)
        scores = scores + attn_bias  # also: MC508 additive
        probs = self.drop(F.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(h.shape)
        h = self.norm1(h + self.drop(self.dense(ctx)))
        return self.norm2(h + self.drop(self.ffn(h)))


class Behrt(nn.Module):
    def __init__(self, d_model=48, n_heads=4, n_layers=2, dropout=0.1):
        super().__init__()
        self.embeddings = BehrtEmbeddings(d_model, dropout)
        self.layers = nn.ModuleList(BehrtLayer(d_model, n_heads, dropout) for _ in range(n_layers))
        self.pooler = nn.Linear(d_model, d_model)
        self.classifier = nn.Linear(d_model, 1)

    def forward(self, codes, ages, segments):
        h = self.embeddings(codes, ages, segments)
        attn_bias = (codes != PAD)[:, None, None, :].float()  # expect: MC508 additive
        for layer in self.layers:
            h = layer(h, attn_bias)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return self.classifier(pooled).squeeze(-1)


def accuracy(model, data):
    model.eval()
    codes, ages, segs, labels = data
    with torch.no_grad():
        pred = (model(codes, ages, segs) > 0).float()
    return (pred == labels).float().mean().item()


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    cohort = [make_patient(rng) for _ in range(800)]
    train, test = cohort[:640], cohort[640:]
    print("positive rate:", sum(y for _, y in cohort) / len(cohort))
    codes, ages, segs, labels = encode(train[:2])
    print("codes:", codes[0].tolist())
    print("ages:", ages[0].tolist())
    print("segments:", segs[0].tolist())
    assert codes.shape == ages.shape == segs.shape

    test_data = encode(test)
    model = Behrt()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(8):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for s in range(0, len(train), 32):
            codes, ages, segs, labels = encode(train[s : s + 32])
            loss = F.binary_cross_entropy_with_logits(model(codes, ages, segs), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: loss {total / 20:.4f}  test accuracy {accuracy(model, test_data):.3f}")

    one = encode(test[:1])
    padded = encode(test[:1] + [max(test, key=lambda p: sum(len(v) for _, v in p[0]))])
    model.eval()
    with torch.no_grad():
        alone = model(*one[:3])[0].item()
        batched = model(*padded[:3])[0].item()
    print(f"logit of patient 0 alone {alone:.4f}, in a padded batch {batched:.4f}")


if __name__ == "__main__":
    main()
