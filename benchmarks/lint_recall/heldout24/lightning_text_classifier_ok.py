"""Sentence classifier written as a LightningModule (a small stand-in base class, no lightning).

Batches come from a Hugging Face-style collator: `input_ids` and `attention_mask`, where
attention_mask is 1 for a real token and 0 for padding. `training_step` turns it into a bool
mask and the model hands it to nn.TransformerEncoder, whose `src_key_padding_mask` means
True = padding (the position is ignored).

Source: conventions.md §1 cheat-sheet (HF attention_mask 1 = keep vs nn.Transformer* True =
drop), seed self_attention_mask_guide.txt §2 (key_padding_mask: True = padding),
pytorch/pytorch PR #141694 (key_padding_mask doc).
"""
import torch
import torch.nn as nn

PAD_ID = 0


class LightningModule(nn.Module):
    """The few LightningModule pieces this file uses."""

    def __init__(self):
        super().__init__()
        self.logged = {}

    def log(self, name, value, prog_bar=False):
        self.logged[name] = float(value.detach())


class Trainer:
    def __init__(self, max_epochs: int):
        self.max_epochs = max_epochs

    def fit(self, module: LightningModule, batches):
        optimizer = module.configure_optimizers()
        module.train()
        for _ in range(self.max_epochs):
            for batch_idx, batch in enumerate(batches):
                loss = module.training_step(batch, batch_idx)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


class TextClassifier(LightningModule):
    def __init__(self, vocab_size=32, dim=32, heads=4, num_classes=2, lr=3e-3):
        super().__init__()
        self.lr = lr
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
        layer = nn.TransformerEncoderLayer(dim, heads, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, input_ids, attention_mask):
        h = self.encoder(self.embed(input_ids), src_key_padding_mask=~attention_mask)
        weights = attention_mask.unsqueeze(-1).float()
        pooled = (h * weights).sum(1) / weights.sum(1)
        return self.head(pooled)

    def training_step(self, batch, batch_idx):
        attention_mask = batch["attention_mask"].bool()
        logits = self(batch["input_ids"], attention_mask)
        loss = nn.functional.cross_entropy(logits, batch["labels"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def collate(sequences, labels):
    width = max(len(s) for s in sequences)
    input_ids = torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sequences])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": torch.tensor(labels)}


if __name__ == "__main__":
    torch.manual_seed(0)
    # label 1 iff token 3 occurs; lengths differ so padding matters
    seqs = [[3, 5, 6], [4, 5, 6, 7, 8], [9, 3], [5, 6, 7, 8, 9, 10], [3, 9, 9, 9], [4, 4]]
    labels = [1, 0, 1, 0, 1, 0]
    batch = collate(seqs, labels)
    model = TextClassifier()
    Trainer(max_epochs=60).fit(model, [batch])
    model.eval()
    with torch.no_grad():
        pred = model(batch["input_ids"], batch["attention_mask"].bool()).argmax(-1)
        alone = collate([seqs[0]], [labels[0]])  # the same sentence without padding
        one = model(alone["input_ids"], alone["attention_mask"].bool())
        batched = model(batch["input_ids"], batch["attention_mask"].bool())[:1]
    print("loss", round(model.logged["train_loss"], 3), "pred", pred.tolist(), "labels", labels)
    print("sentence 0 batched vs alone:", (one - batched).abs().max().item())
