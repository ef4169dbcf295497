"""Grape variety from sommelier tasting notes (Colab notebook export).

Tasting notes from a wine-review scrape are tokenized with a word-level tokenizer that
mimics the Hugging Face interface (input_ids and an int64 attention_mask), and an encoder
predicts the grape variety.

Source: conventions.md section 1 (HF 2-D attention_mask row) and section 2.4
"""

# %%
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(9)
torch.manual_seed(9)

VARIETIES = {
    "pinot noir": ["cherry", "earthy", "silky", "raspberry", "forest"],
    "cabernet sauvignon": ["cassis", "cedar", "tannic", "graphite", "blackcurrant"],
    "riesling": ["petrol", "lime", "honeyed", "slate", "apricot"],
    "sauvignon blanc": ["gooseberry", "grassy", "zesty", "passionfruit", "flinty"],
}
NOTE_WORDS = ["nose", "of", "palate", "shows", "finish", "long", "medium", "bright", "hints", "and"]


class TastingTokenizer:
    def __init__(self, texts):
        self.vocab = {"[PAD]": 0, "[UNK]": 1}
        for t in texts:
            for w in t.split():
                self.vocab.setdefault(w, len(self.vocab))

    def __call__(self, texts):
        rows = [[self.vocab.get(w, 1) for w in t.split()] for t in texts]
        longest = max(map(len, rows))
        return {
            "input_ids": torch.tensor([r + [0] * (longest - len(r)) for r in rows]),
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (longest - len(r)) for r in rows]),
        }


def tasting_note():
    label = random.randrange(len(VARIETIES))
    words = random.sample(NOTE_WORDS, 4) + random.sample(list(VARIETIES.values())[label], 2)
    random.shuffle(words)
    return " ".join(words + random.sample(NOTE_WORDS, random.randint(0, 5))), label


notes = [tasting_note() for _ in range(500)]
tokenizer = TastingTokenizer([t for t, _ in notes])

# %%
class VarietalClassifier(nn.Module):
    def __init__(self, vocab_size, d_model=48, nhead=4, num_layers=2, num_labels=len(VARIETIES)):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model, padding_idx=0)
        layer = nn.TransformerEncoderLayer(d_model, nhead, 2 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(d_model, num_labels)

    def forward(self, input_ids, padding_mask):
        h = self.encoder(self.embeddings(input_ids), src_key_padding_mask=padding_mask)
        keep = (~padding_mask).unsqueeze(-1).float()
        return self.classifier((h * keep).sum(1) / keep.sum(1))


model = VarietalClassifier(len(tokenizer.vocab))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)

# %%
model.train()
for epoch in range(4):
    random.shuffle(notes)
    for i in range(0, 400, 25):
        texts, labels = zip(*notes[i:i + 25])
        batch = tokenizer(list(texts))
        logits = model(batch["input_ids"], batch["attention_mask"] == 0)
        loss = F.cross_entropy(logits, torch.tensor(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")

# %%
model.eval()
texts, labels = zip(*notes[400:])
batch = tokenizer(list(texts))
with torch.no_grad():
    pred = model(batch["input_ids"], batch["attention_mask"] == 0).argmax(-1)
print("variety accuracy", (pred == torch.tensor(labels)).float().mean().item())
