"""Library of Congress Classification main classes for catalogue records, fine-tuned with Accelerate.

Title and summary of each MARC record (245 $a, 520 $a) are tokenized, and a small BERT-like
encoder with an eager attention that adds an extended mask predicts the LCC main class (B, D,
H, K, N, Q, R, T). `accelerate launch --mixed_precision bf16 lcc_subjects_accelerate.py`;
gradient accumulation, gathered metrics and the saved model go through the Accelerator.

Source: huggingface/transformers#32195 (conventions.md section 3 item 25), section 1 (HF 4.x AttentionMaskConverter row).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

CLASSES = {
    "B": ["philosophy", "ethics", "religion", "kant", "theology", "mind"],
    "D": ["history", "europe", "war", "empire", "medieval", "revolution"],
    "H": ["economics", "markets", "labor", "society", "finance", "trade"],
    "K": ["law", "court", "constitution", "statutes", "contracts", "rights"],
    "N": ["art", "painting", "sculpture", "museum", "artists", "renaissance"],
    "Q": ["science", "physics", "chemistry", "mathematics", "biology", "quantum"],
    "R": ["medicine", "nursing", "clinical", "disease", "surgery", "patients"],
    "T": ["engineering", "technology", "manufacturing", "electrical", "civil", "design"],
}
COMMON = "a an the of and in to its introduction study new history handbook essays on from".split()
LABELS = sorted(CLASSES)
PAD_ID, CLS_ID = 0, 1


@dataclass
class EncoderConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_position: int = 64
    num_labels: int = len(LABELS)


class CatalogueRecords(Dataset):
    def __init__(self, n, seed, vocab):
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            label = rng.randrange(len(LABELS))
            words = rng.sample(CLASSES[LABELS[label]], rng.randint(1, 3)) + [rng.choice(COMMON) for _ in range(rng.randint(2, 30))]
            rng.shuffle(words)
            self.items.append((torch.tensor([CLS_ID] + [vocab[w] for w in words]), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        ids, label = self.items[i]
        return {"input_ids": ids, "label": label}


def collate(batch):
    input_ids = pad_sequence([b["input_ids"] for b in batch], batch_first=True, padding_value=PAD_ID)
    keep = input_ids != PAD_ID
    extended = (1.0 - keep[:, None, None, :].float()) * torch.finfo(torch.float32).min
    return {"input_ids": input_ids, "extended_attention_mask": extended, "labels": torch.tensor([b["label"] for b in batch])}


class SelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.h = cfg.num_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.output = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, extended_attention_mask):
        b, t, d = x.shape
        q, k, v = (m(x).view(b, t, self.h, d // self.h).transpose(1, 2) for m in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)
        scores = scores + extended_attention_mask
        probs = scores.softmax(dim=-1)
        return self.output((probs @ v).transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))
        self.ln2 = nn.LayerNorm(cfg.hidden_size)

    def forward(self, x, extended_attention_mask):
        x = self.ln1(x + self.attention(x, extended_attention_mask))
        return self.ln2(x + self.ffn(x))


class RecordClassifier(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_layers)])
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, input_ids, extended_attention_mask, labels=None):
        x = self.word_embeddings(input_ids) + self.position_embeddings(torch.arange(input_ids.size(1), device=input_ids.device))
        for layer in self.layers:
            x = layer(x, extended_attention_mask)
        logits = self.classifier(x[:, 0])
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def main(epochs=4, batch_size=32, lr=1e-3):
    accelerator = Accelerator(gradient_accumulation_steps=2)
    set_seed(0)
    words = sorted({w for ws in CLASSES.values() for w in ws} | set(COMMON))
    vocab = {w: i + 2 for i, w in enumerate(words)}
    train_dl = DataLoader(CatalogueRecords(4000, 0, vocab), batch_size=batch_size, shuffle=True, collate_fn=collate)
    eval_dl = DataLoader(CatalogueRecords(800, 1, vocab), batch_size=batch_size, collate_fn=collate)
    model = RecordClassifier(EncoderConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=epochs * len(train_dl))
    model, optimizer, train_dl, eval_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, eval_dl, scheduler)
    for epoch in range(epochs):
        model.train()
        for batch in train_dl:
            with accelerator.accumulate(model):
                loss, _ = model(**batch)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        model.eval()
        correct = total = 0
        for batch in eval_dl:
            with torch.no_grad():
                _, logits = model(**batch)
            preds, refs = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
            correct += (preds == refs).sum().item()
            total += refs.numel()
        accelerator.print(f"epoch {epoch}: accuracy {correct / total:.3f}")
    accelerator.wait_for_everyone()
    accelerator.save_model(model, "lcc_classifier")


if __name__ == "__main__":
    main()
