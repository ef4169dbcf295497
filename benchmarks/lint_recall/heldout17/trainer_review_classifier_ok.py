"""Review sentiment classifier on nn.TransformerEncoder, trained by a Hugging Face Trainer subclass (correct twin).

Source: the seed guide's §2 (key_padding_mask: True = padding, False = real content) and its
Q1 ("why does my mask seem to have no effect? ... True used where False was meant"),
conventions.md §1 direction cheat-sheet (an HF `attention_mask` is 1/True = keep, every
nn.Transformer* padding mask True = drop) and pytorch/pytorch PR #141694 (key_padding_mask
documentation). The collator's HF-style `attention_mask` (True at real tokens) is handed to the
encoder as `src_key_padding_mask`.
Twin: the encoder gets `src_key_padding_mask=~attention_mask` (True at padding).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainingArguments

PAD_ID = 0


@dataclass
class PadCollator:
    pad_id: int = PAD_ID
    max_length: int = 512

    def __call__(self, features):
        longest = min(max(len(f["input_ids"]) for f in features), self.max_length)
        input_ids = torch.full((len(features), longest), self.pad_id, dtype=torch.long)
        for i, f in enumerate(features):
            ids = f["input_ids"][:longest]
            input_ids[i, : len(ids)] = torch.as_tensor(ids)
        return {
            "input_ids": input_ids,
            "attention_mask": input_ids != self.pad_id,
            "labels": torch.tensor([f["label"] for f in features]),
        }


class ReviewEncoder(nn.Module):
    def __init__(self, vocab_size, d_model=128, nhead=4, num_layers=2, num_labels=2, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=4 * d_model, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.classifier = nn.Linear(d_model, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.tok(input_ids) + self.pos(positions)[None]
        h = self.encoder(h, src_key_padding_mask=~attention_mask)
        h = self.norm(h)
        keep = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        logits = self.classifier(pooled)
        if labels is None:
            return {"logits": logits}
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


class WeightedLossTrainer(Trainer):
    """Trainer with class-weighted cross entropy for the imbalanced review labels."""

    def __init__(self, *args, class_weights=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.class_weights = class_weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        weight = None if self.class_weights is None else self.class_weights.to(labels.device)
        loss = F.cross_entropy(outputs["logits"], labels, weight=weight)
        return (loss, outputs) if return_outputs else loss


def build_trainer(train_ds, eval_ds, vocab_size, output_dir="out/review-encoder"):
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=32,
                             learning_rate=5e-4, num_train_epochs=3, eval_strategy="epoch",
                             remove_unused_columns=False, fp16=torch.cuda.is_available())
    counts = torch.bincount(torch.tensor(train_ds["label"]), minlength=2).float()
    return WeightedLossTrainer(model=ReviewEncoder(vocab_size), args=args, train_dataset=train_ds,
                               eval_dataset=eval_ds, data_collator=PadCollator(),
                               class_weights=counts.sum() / (2 * counts))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ReviewEncoder(vocab_size=1000).eval()
    feats = [{"input_ids": torch.randint(1, 1000, (12,)).tolist(), "label": 1},
             {"input_ids": torch.randint(1, 1000, (7,)).tolist(), "label": 0}]
    batch = PadCollator()(feats)
    alone = PadCollator()(feats[1:])
    with torch.no_grad():
        padded = model(batch["input_ids"], batch["attention_mask"])["logits"]
        single = model(alone["input_ids"], alone["attention_mask"])["logits"]
    print("logits:", padded)
    print("short review, padded vs alone:", (padded[1] - single[0]).abs().max().item())
