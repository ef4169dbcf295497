"""Credit-card fraud detection on transaction sequences in the layout of IBM/TabFormer.

A ``Vocabulary`` with one id space per field, ``TransactionDataset`` windows of a card's recent
transactions, the hierarchical ``TabFormerEmbeddings`` (a field transformer turning each row into
one vector), a BERT over the rows with ``get_extended_attention_mask``, masked field modelling as
pretraining and a fraud head on the window's last transaction.

Source: pytorch/pytorch#103963 and huggingface/transformers#32195 (conventions.md section 3 items
6 and 25); conventions.md section 1 (HF 4.x AttentionMaskConverter row).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

FIELDS = ["amount", "mcc", "city", "hour", "chip"]
FIELD_SIZES = {"amount": 12, "mcc": 20, "city": 30, "hour": 24, "chip": 3}


class Vocabulary:
    special = ["[PAD]", "[MASK]"]

    def __init__(self):
        self.offsets, size = {}, len(self.special)
        for f in FIELDS:
            self.offsets[f] = size
            size += FIELD_SIZES[f]
        self.size = size
        self.pad_id, self.mask_id = 0, 1

    def get_id(self, field_name, value):
        return self.offsets[field_name] + value


def simulate_card(rng, n):
    home, mcc_pref = rng.randrange(30), [rng.randrange(20) for _ in range(3)]
    rows, fraud = [], []
    compromised_at = rng.randrange(n) if rng.random() < 0.35 else n
    for t in range(n):
        bad = t >= compromised_at and rng.random() < 0.8
        city = rng.randrange(30) if bad else (home if rng.random() < 0.9 else rng.randrange(30))
        amount = min(11, int(rng.expovariate(0.25)) + (6 if bad else 0))
        mcc = rng.randrange(20) if bad else rng.choice(mcc_pref)
        hour = rng.choice([1, 2, 3, 4]) if bad else rng.randint(8, 22)
        chip = 2 if bad else rng.choice([0, 0, 1])
        rows.append({"amount": amount, "mcc": mcc, "city": city, "hour": hour, "chip": chip})
        fraud.append(int(bad))
    return rows, fraud


class TransactionDataset:
    def __init__(self, vocab, n_cards, seed, max_len=10):
        rng = random.Random(seed)
        self.samples = []
        for _ in range(n_cards):
            rows, fraud = simulate_card(rng, rng.randint(3, max_len))
            ids = [[vocab.get_id(f, r[f]) for f in FIELDS] for r in rows]
            self.samples.append((ids, fraud[-1]))
        self.max_len = max_len

    def collate(self, items):
        batch = len(items)
        input_ids = torch.zeros(batch, self.max_len, len(FIELDS), dtype=torch.long)
        attention_mask = torch.zeros(batch, self.max_len, dtype=torch.long)
        for i, (ids, _) in enumerate(items):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            attention_mask[i, : len(ids)] = 1
        labels = torch.tensor([y for _, y in items], dtype=torch.float)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


@dataclass
class TabFormerConfig:
    vocab_size: int
    field_hidden_size: int = 32
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 16
    attention_probs_dropout_prob: float = 0.1


class TabFormerEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.field_hidden_size, padding_idx=0)
        layer = nn.TransformerEncoderLayer(config.field_hidden_size, 2, 2 * config.field_hidden_size, 0.0, batch_first=True)
        self.field_transformer = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.lin_proj = nn.Linear(config.field_hidden_size * len(FIELDS), config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size)

    def forward(self, input_ids):
        b, l, f = input_ids.shape
        fields = self.field_transformer(self.word_embeddings(input_ids.view(b * l, f)))
        rows = self.lin_proj(fields.reshape(b, l, -1))
        return self.LayerNorm(rows + self.position_embeddings(torch.arange(l, device=input_ids.device)))


class TabFormerSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def transpose_for_scores(self, x):
        return x.view(x.size(0), x.size(1), self.num_heads, -1).transpose(1, 2)

    def forward(self, hidden_states, attention_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, dropout_p=self.dropout_prob if self.training else 0.0
        )
        return context.transpose(1, 2).reshape(hidden_states.shape)


class TabFormerLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = TabFormerSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU())
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.norm2 = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, extended_attention_mask):
        h = self.norm1(hidden_states + self.attention_output(self.attention(hidden_states, extended_attention_mask)))
        return self.norm2(h + self.output(self.intermediate(h)))


class TabFormerBertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = TabFormerEmbeddings(config)
        self.layers = nn.ModuleList([TabFormerLayer(config) for _ in range(config.num_hidden_layers)])

    def get_extended_attention_mask(self, attention_mask, dtype):
        extended_attention_mask = attention_mask[:, None, None, :]
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # expect: MC508 extended_mask
        return extended_attention_mask

    def forward(self, input_ids, attention_mask):
        hidden_states = self.embeddings(input_ids)
        extended = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended)
        return hidden_states


class TabFormerForFraud(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = TabFormerBertModel(config)
        self.field_heads = nn.Linear(config.hidden_size, config.vocab_size)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def mlm_loss(self, input_ids, attention_mask, vocab, mlm_probability=0.15):
        pick = (torch.rand(input_ids.shape) < mlm_probability) & attention_mask.bool()[..., None]
        masked_ids = input_ids.masked_fill(pick, vocab.mask_id)
        hidden = self.bert(masked_ids, attention_mask)
        labels = input_ids.masked_fill(~pick, -100)
        logits = self.field_heads(hidden).unsqueeze(2).expand(-1, -1, len(FIELDS), -1)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)

    def forward(self, input_ids, attention_mask, labels=None):
        hidden = self.bert(input_ids, attention_mask)
        last = attention_mask.sum(1) - 1
        logits = self.classifier(hidden[torch.arange(hidden.size(0)), last]).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return (pos[:, None] > neg[None, :]).float().mean().item()


def main():
    torch.manual_seed(0)
    vocab = Vocabulary()
    train, test = TransactionDataset(vocab, 1200, seed=1), TransactionDataset(vocab, 400, seed=2)
    model = TabFormerForFraud(TabFormerConfig(vocab_size=vocab.size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for stage, epochs in (("mlm", 2), ("fraud", 5)):
        for epoch in range(epochs):
            model.train()
            random.Random(epoch).shuffle(train.samples)
            total = 0.0
            for s in range(0, len(train.samples), 32):
                batch = train.collate(train.samples[s : s + 32])
                if stage == "mlm":
                    loss = model.mlm_loss(batch["input_ids"], batch["attention_mask"], vocab)
                else:
                    loss = model(**batch)["loss"]
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item()
            print(f"{stage} epoch {epoch} loss {total / math.ceil(len(train.samples) / 32):.4f}")
    model.eval()
    with torch.no_grad():
        batch = test.collate(test.samples)
        scores = model(**batch)["logits"]
    print(f"test AUC {auc(scores, batch['labels']):.3f}  fraud rate {batch['labels'].mean().item():.3f}")


if __name__ == "__main__":
    main()
