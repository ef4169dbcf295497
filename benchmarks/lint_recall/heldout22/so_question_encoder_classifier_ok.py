"""Sentence classifier on nn.TransformerEncoder, from a Stack Overflow question.

"My TransformerEncoder classifier predicts the same class for every sentence": the asker's
script, trimmed. A toy whitespace tokenizer returns the same dict a Hugging Face tokenizer
does (`input_ids`, `attention_mask` with 1 = real token); the model mean-pools the encoder
output over the real tokens.

Source: conventions.md §1 cheat-sheet, seed self_attention_mask_guide.txt §2, pytorch/pytorch PR #141694
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tokenizer:
    def __init__(self, pad_id=0):
        self.pad_id, self.vocab = pad_id, {}

    def __call__(self, texts):
        rows = [[self.vocab.setdefault(w, len(self.vocab) + 1) for w in t.lower().split()] for t in texts]
        n = max(len(r) for r in rows)
        ids = [r + [self.pad_id] * (n - len(r)) for r in rows]
        mask = [[1] * len(r) + [0] * (n - len(r)) for r in rows]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}


class Classifier(nn.Module):
    def __init__(self, vocab_size=64, d_model=32, n_classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.fc = nn.Linear(d_model, n_classes)

    def forward(self, input_ids, pad_mask):
        h = self.encoder(self.emb(input_ids), src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.fc(pooled)


texts = ["great movie loved it", "terrible plot", "loved the acting", "boring and terrible film"]
labels = torch.tensor([1, 0, 1, 0])
tokenizer = Tokenizer()
batch = tokenizer(texts)
mask = batch["attention_mask"] == 0

torch.manual_seed(0)
model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(15):
    logits = model(batch["input_ids"], mask)
    loss = F.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss:", round(loss.item(), 4))

model.eval()
with torch.no_grad():
    preds = model(batch["input_ids"], mask).argmax(-1)
print("predictions:", preds.tolist(), "labels:", labels.tolist())
