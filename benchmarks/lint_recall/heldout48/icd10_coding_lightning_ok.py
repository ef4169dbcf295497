"""ICD-10 coding of discharge summaries with label-wise attention, as a LightningModule.

A small transformer encoder reads the note and one attention query per code (LAAT, Vu et al. 2020)
pools the tokens that support that code; multi-label BCE, micro-F1 over the code set. Trained with
`python icd10_coding_lightning.py --max-epochs 8`.

Source: seed self_attention_mask_guide.txt (section 7, Q1), conventions.md section 1 (direction cheat-sheet, HF attention_mask row).
"""

import argparse
import random
import re

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CODES = ["I10", "E11.9", "N18.3", "J44.1", "I50.9", "E78.5", "F32.9", "K21.9"]
CUES = {
    "I10": ["hypertension", "bp", "amlodipine", "lisinopril"],
    "E11.9": ["diabetes", "metformin", "a1c", "glucose"],
    "N18.3": ["ckd", "creatinine", "egfr", "nephrology"],
    "J44.1": ["copd", "exacerbation", "nebulizer", "prednisone"],
    "I50.9": ["chf", "furosemide", "edema", "ejection"],
    "E78.5": ["hyperlipidemia", "statin", "ldl", "atorvastatin"],
    "F32.9": ["depression", "sertraline", "mood", "phq9"],
    "K21.9": ["gerd", "reflux", "omeprazole", "heartburn"],
}
FILLER = "patient admitted stable discharged home follow up clinic vitals reviewed plan continue".split()


def synth_note(rng):
    codes = rng.sample(CODES, rng.randint(1, 3))
    words = [rng.choice(FILLER) for _ in range(rng.randint(20, 60))]
    for code in codes:
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words)), rng.choice(CUES[code]))
    return " ".join(words), [CODES.index(c) for c in codes]


class NoteTokenizer:
    def __init__(self, max_length=96):
        vocab = sorted(set(FILLER) | {w for ws in CUES.values() for w in ws})
        self.itos = ["[PAD]", "[UNK]"] + vocab
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.pad_token_id = 0
        self.max_length = max_length

    def __call__(self, texts):
        ids = [[self.stoi.get(w, 1) for w in re.findall(r"[a-z0-9.]+", t.lower())][: self.max_length] for t in texts]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [self.pad_token_id] * (width - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}


class NotesDataset(Dataset):
    def __init__(self, n, seed):
        rng = random.Random(seed)
        self.items = [synth_note(rng) for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class NotesDataModule(L.LightningDataModule):
    def __init__(self, batch_size=16):
        super().__init__()
        self.batch_size = batch_size
        self.tokenizer = NoteTokenizer()

    def setup(self, stage=None):
        self.train_set = NotesDataset(800, seed=0)
        self.val_set = NotesDataset(200, seed=1)

    def collate(self, batch):
        enc = self.tokenizer([text for text, _ in batch])
        labels = torch.zeros(len(batch), len(CODES))
        for row, (_, codes) in enumerate(batch):
            labels[row, codes] = 1.0
        enc["labels"] = labels
        return enc

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size, collate_fn=self.collate)


class LabelWiseAttention(nn.Module):
    def __init__(self, d_model, n_labels, d_att=64):
        super().__init__()
        self.W = nn.Linear(d_model, d_att, bias=False)
        self.U = nn.Linear(d_att, n_labels, bias=False)
        self.final = nn.Linear(d_model, n_labels)

    def forward(self, hidden, attention_mask):
        z = torch.tanh(self.W(hidden))
        scores = self.U(z).transpose(1, 2)
        scores = scores.masked_fill(attention_mask.eq(0).unsqueeze(1), float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        pooled = alpha @ hidden
        return (self.final.weight * pooled).sum(dim=-1) + self.final.bias


class ICDCoder(L.LightningModule):
    def __init__(self, vocab_size, n_labels=len(CODES), d_model=96, n_heads=4, n_layers=2, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(128, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = LabelWiseAttention(d_model, n_labels)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.embed(input_ids) + self.pos(positions)
        x = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        return self.head(x, attention_mask)

    def training_step(self, batch, batch_idx):
        logits = self(batch["input_ids"], batch["attention_mask"])
        loss = F.binary_cross_entropy_with_logits(logits, batch["labels"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        logits = self(batch["input_ids"], batch["attention_mask"])
        loss = F.binary_cross_entropy_with_logits(logits, batch["labels"])
        pred = (logits.sigmoid() > 0.5).float()
        tp = (pred * batch["labels"]).sum()
        f1 = 2 * tp / (pred.sum() + batch["labels"].sum()).clamp(min=1)
        self.log_dict({"val_loss": loss, "val_micro_f1": f1}, prog_bar=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    L.seed_everything(7)
    dm = NotesDataModule(args.batch_size)
    model = ICDCoder(vocab_size=len(dm.tokenizer.itos))
    trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="auto", gradient_clip_val=1.0, log_every_n_steps=10)
    trainer.fit(model, datamodule=dm)


if __name__ == "__main__":
    main()
