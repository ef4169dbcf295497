"""Species composition from fisheries observer haul notes (exported from a Colab notebook).

Observers on groundfish trips write short free-text notes per haul; this notebook tags which
species groups were landed so the notes can be matched against the dealer reports.

Source: conventions.md section 1 (SDPA row and direction cheat-sheet); seed self_attention_mask_guide.txt section 2
"""

# %%
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
random.seed(0)

SPECIES = ["cod", "haddock", "pollock", "hake", "plaice", "monkfish"]
GEAR = ["trawl", "gillnet", "longline", "seine"]
FILLER = ["haul", "observed", "landed", "discarded", "bycatch", "kg", "boxes", "deck",
          "sorted", "small", "large", "mixed"]
PAD_ID = 0

vocab = {"<pad>": 0, "<unk>": 1}
for w in SPECIES + GEAR + FILLER:
    vocab.setdefault(w, len(vocab))

# %%
def make_note():
    present = [s for s in SPECIES if random.random() < 0.35] or [random.choice(SPECIES)]
    words = [random.choice(GEAR)]
    for s in present:
        words += random.sample(FILLER, 2) + [s]
    words += random.sample(FILLER, random.randint(0, 4))
    labels = torch.tensor([float(s in present) for s in SPECIES])
    return words, labels


notes = [make_note() for _ in range(640)]
train_notes, test_notes = notes[:512], notes[512:]


def collate(batch):
    ids = [torch.tensor([vocab.get(w, 1) for w in words]) for words, _ in batch]
    ids = nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=PAD_ID)
    return {
        "input_ids": ids,
        "key_padding_mask": ids == PAD_ID,
        "labels": torch.stack([y for _, y in batch]),
    }


# %%
class HaulTagger(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, n_labels=len(SPECIES)):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.pos = nn.Parameter(torch.randn(64, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.queries = nn.Parameter(torch.randn(n_labels, d_model) * 0.02)
        self.n_heads = n_heads
        self.out = nn.Linear(d_model, 1)

    def pool(self, h, key_padding_mask):
        b, t, d = h.shape
        q = self.queries.expand(b, -1, -1).reshape(b, -1, self.n_heads, d // self.n_heads).transpose(1, 2)
        kv = h.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        pooled = F.scaled_dot_product_attention(q, kv, kv, attn_mask=key_padding_mask[:, None, None, :])  # expect: MC502 method
        return pooled.transpose(1, 2).reshape(b, -1, d)

    def forward(self, input_ids, key_padding_mask):
        h = self.embed(input_ids) + self.pos[: input_ids.size(1)]
        h = self.encoder(h, src_key_padding_mask=key_padding_mask)
        return self.out(self.pool(h, key_padding_mask)).squeeze(-1)


model = HaulTagger(len(vocab))
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)

# %%
for epoch in range(6):
    random.shuffle(train_notes)
    model.train()
    for i in range(0, len(train_notes), 32):
        batch = collate(train_notes[i:i + 32])
        logits = model(batch["input_ids"], batch["key_padding_mask"])
        loss = F.binary_cross_entropy_with_logits(logits, batch["labels"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")

# %%
model.eval()
with torch.no_grad():
    batch = collate(test_notes)
    pred = model(batch["input_ids"], batch["key_padding_mask"]) > 0
    gold = batch["labels"].bool()
    tp = (pred & gold).sum().item()
    f1 = 2 * tp / (pred.sum().item() + gold.sum().item())
print(f"micro-F1 on held-out hauls: {f1:.3f}")
