"""Anomaly-category classification of aviation safety reports (NASA ASRS style).

Pilot and controller narratives are tokenised (Hugging Face-style output with
input_ids and an int64 attention_mask), encoded by nn.TransformerEncoder and
pooled with a learned attention head before the event-category classifier
used to route reports to analysts.

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet); seed self_attention_mask_guide.txt §7 Q1; seed masked_fill_inplace.txt (作用)
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORIES = ("altitude deviation", "runway incursion", "weather encounter", "equipment malfunction")
PHRASES = {
    0: ["climbed through assigned altitude", "leveled off 300 ft high", "missed the crossing restriction"],
    1: ["crossed the hold short line", "entered the active runway without clearance", "tower issued go around for traffic on runway"],
    2: ["encountered severe turbulence", "flew into embedded thunderstorm", "moderate icing in the climb"],
    3: ["hydraulic system a low pressure", "autopilot disconnected uncommanded", "generator fail light illuminated"],
}
CONTEXT = ("during", "the", "we", "first", "officer", "captain", "approach", "departure", "atc", "checklist", "then", "flight", "crew", "noticed")


def make_reports(n, seed=0):
    rng = random.Random(seed)
    reports = []
    for _ in range(n):
        label = rng.randrange(len(CATEGORIES))
        words = [rng.choice(CONTEXT) for _ in range(rng.randint(3, 30))]
        at = rng.randint(0, len(words))
        words[at:at] = rng.choice(PHRASES[label]).split()
        reports.append((" ".join(words), label))
    return reports


class NarrativeTokenizer:
    def __init__(self, texts, max_length=48):
        words = sorted({w for t in texts for w in t.split()})
        self.vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
        self.max_length = max_length

    def __call__(self, texts):
        ids = [[self.vocab.get(w, 1) for w in t.split()][: self.max_length] for t in texts]
        n = max(len(x) for x in ids)
        return {
            "input_ids": torch.tensor([x + [0] * (n - len(x)) for x in ids]),
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids]),
        }


class AttentionPooling(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.score = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def forward(self, hidden, attention_mask):
        w = self.score(hidden).squeeze(-1)
        w = w.masked_fill(attention_mask == 0, float("-inf"))
        w = torch.softmax(w, dim=-1)
        return torch.einsum("bn,bnd->bd", w, hidden)


class ReportClassifier(nn.Module):
    def __init__(self, vocab_size, dim=64, heads=4, layers=2, max_len=48):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, max_len, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = AttentionPooling(dim)
        self.head = nn.Linear(dim, len(CATEGORIES))

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos[:, : input_ids.shape[1]]
        x = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        return self.head(self.pool(x, attention_mask))


@torch.no_grad()
def accuracy(model, tokenizer, reports):
    model.eval()
    enc = tokenizer([t for t, _ in reports])
    pred = model(**enc).argmax(-1)
    return (pred == torch.tensor([y for _, y in reports])).float().mean().item()


def main():
    torch.manual_seed(0)
    train, test = make_reports(1200, seed=1), make_reports(300, seed=2)
    tokenizer = NarrativeTokenizer([t for t, _ in train])
    model = ReportClassifier(len(tokenizer.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        model.train()
        random.Random(epoch).shuffle(train)
        for i in range(0, len(train), 32):
            batch = train[i : i + 32]
            enc = tokenizer([t for t, _ in batch])
            loss = F.cross_entropy(model(**enc), torch.tensor([y for _, y in batch]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f} test accuracy {accuracy(model, tokenizer, test):.3f}")


if __name__ == "__main__":
    main()
