"""Citation intent classification (SciCite labels: background, method, result).

Citation contexts from papers are tokenised with a word-level vocabulary,
batched by a collate function with dynamic padding and classified by a small
SciBERT-shaped encoder on scaled_dot_product_attention with mean pooling.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25)
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

LABELS = ("background", "method", "result")
PAD_ID, UNK_ID, CLS_ID = 0, 1, 2

CUES = {
    "background": ["has been studied", "prior work", "is widely used", "recent surveys", "was introduced by"],
    "method": ["we follow", "we use the", "implemented as in", "using the approach of", "we adopt"],
    "result": ["consistent with", "in contrast to", "outperforms", "similar to the findings of", "agrees with"],
}
FILLER = "the model data corpus parser tagger embedding task results dataset baseline score annotation study".split()


def make_contexts(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.randrange(len(LABELS))
        left = rng.sample(FILLER, rng.randint(1, 12))
        right = rng.sample(FILLER, rng.randint(0, 10))
        text = " ".join(left + [rng.choice(CUES[LABELS[label]]), "@@CITATION"] + right)
        out.append((text, label))
    return out


class Vocab:
    def __init__(self, texts):
        words = sorted({w for t in texts for w in t.split()})
        self.stoi = {w: i + 3 for i, w in enumerate(words)}

    def __len__(self):
        return len(self.stoi) + 3

    def encode(self, text):
        return [CLS_ID] + [self.stoi.get(w, UNK_ID) for w in text.split()]


def collate_citations(batch, vocab):
    ids = [torch.tensor(vocab.encode(t)) for t, _ in batch]
    input_ids = nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=PAD_ID)
    attention_mask = (input_ids != PAD_ID).float()  # expect: MC508 collate
    labels = torch.tensor([y for _, y in batch])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = dropout

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, -1).transpose(1, 2)

    def forward(self, hidden_states, attention_mask):
        q, k, v = self.split(self.query(hidden_states)), self.split(self.key(hidden_states)), self.split(self.value(hidden_states))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask[:, None, None, :], dropout_p=self.dropout if self.training else 0.0)  # also: MC508
        return ctx.transpose(1, 2).flatten(2)


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, dropout=0.1):
        super().__init__()
        self.attention = SelfAttention(hidden, heads, dropout)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x, attention_mask):
        x = self.ln1(x + self.attn_out(self.attention(x, attention_mask)))
        return self.ln2(x + self.ffn(x))


class CitationIntentModel(nn.Module):
    def __init__(self, vocab_size, hidden=64, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, hidden, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads) for _ in range(layers))
        self.classifier = nn.Linear(hidden, len(LABELS))

    def forward(self, input_ids, attention_mask, labels=None):
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        for layer in self.layers:
            x = layer(x, attention_mask)
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        logits = self.classifier((x * m).sum(1) / m.sum(1))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


@torch.no_grad()
def macro_f1(model, loader):
    model.eval()
    preds, gold = [], []
    for batch in loader:
        _, logits = model(**batch)
        preds.append(logits.argmax(-1))
        gold.append(batch["labels"])
    preds, gold = torch.cat(preds), torch.cat(gold)
    f1s = []
    for c in range(len(LABELS)):
        tp = ((preds == c) & (gold == c)).sum().item()
        f1s.append(2 * tp / max((preds == c).sum().item() + (gold == c).sum().item(), 1))
    return sum(f1s) / len(f1s)


def main():
    torch.manual_seed(0)
    train, test = make_contexts(1200, seed=1), make_contexts(300, seed=2)
    vocab = Vocab([t for t, _ in train])
    collate = lambda b: collate_citations(b, vocab)
    train_loader = DataLoader(train, batch_size=32, shuffle=True, collate_fn=collate)
    test_loader = DataLoader(test, batch_size=64, collate_fn=collate)
    model = CitationIntentModel(len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for epoch in range(3):
        model.train()
        for batch in train_loader:
            loss, _ = model(**batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f} macro-F1 {macro_f1(model, test_loader):.3f}")


if __name__ == "__main__":
    main()
