"""Customer-support ticket routing in the manner of Uber's COTA (Molino et al., KDD 2018).

A ticket is the customer's first message; the router predicts the support queue and whether the
ticket is urgent. The layout follows a LightningModule (training_step / validation_step /
configure_optimizers) written as a plain nn.Module, with a word-level tokenizer that returns
``input_ids`` / ``attention_mask`` dicts the way Hugging Face tokenizers do.

Source: seed self_attention_mask_guide.txt (section 2, key_padding_mask); conventions.md section 1
(direction cheat-sheet) and section 5 item 1.
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

QUEUES = ["billing", "shipping", "technical", "account", "returns"]
QUEUE_WORDS = {
    "billing": ["invoice", "charged", "refund", "card", "payment", "twice"],
    "shipping": ["package", "delivery", "courier", "tracking", "late", "address"],
    "technical": ["app", "crash", "error", "login", "update", "screen"],
    "account": ["password", "email", "profile", "locked", "verify", "username"],
    "returns": ["return", "label", "damaged", "exchange", "size", "broken"],
}
URGENT_WORDS = ["asap", "urgent", "immediately", "today", "now"]
FILLER = ["hi", "hello", "please", "my", "the", "i", "is", "was", "a", "thanks", "order", "help", "can", "you", "it"]


@dataclass
class RouterConfig:
    vocab_size: int = 0
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    ffn_size: int = 128
    max_positions: int = 64
    dropout: float = 0.1
    num_queues: int = len(QUEUES)
    lr: float = 2e-3


class TicketTokenizer:
    def __init__(self, corpus):
        words = sorted({w for text in corpus for w in text.split()})
        self.pad_token_id = 0
        self.vocab = {"[PAD]": 0, "[UNK]": 1}
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))

    def __call__(self, texts, max_length=48):
        ids = [[self.vocab.get(w, 1) for w in t.split()][:max_length] for t in texts]
        width = max(len(row) for row in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def make_ticket(rng):
    queue = rng.randrange(len(QUEUES))
    urgent = rng.random() < 0.3
    words = [rng.choice(FILLER) for _ in range(rng.randint(3, 20))]
    words += [rng.choice(QUEUE_WORDS[QUEUES[queue]]) for _ in range(rng.randint(1, 3))]
    if urgent:
        words.append(rng.choice(URGENT_WORDS))
    rng.shuffle(words)
    return " ".join(words), queue, int(urgent)


class TicketEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(config.hidden_size, config.num_heads, dropout=config.dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(config.hidden_size)
        self.norm2 = nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(
            nn.Linear(config.hidden_size, config.ffn_size), nn.GELU(), nn.Linear(config.ffn_size, config.hidden_size)
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden_states, attention_mask):
        h = self.norm1(hidden_states)
        attn_out, _ = self.self_attn(h, h, h, key_padding_mask=~attention_mask, need_weights=False)
        hidden_states = hidden_states + self.dropout(attn_out)
        return hidden_states + self.dropout(self.ffn(self.norm2(hidden_states)))


class QueueAttentionPool(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.queries = nn.Parameter(torch.randn(config.num_queues, config.hidden_size) * 0.02)
        self.attn = nn.MultiheadAttention(config.hidden_size, 1, batch_first=True)

    def forward(self, hidden_states, padding_mask):
        q = self.queries.unsqueeze(0).expand(hidden_states.size(0), -1, -1)
        pooled, _ = self.attn(q, hidden_states, hidden_states, key_padding_mask=padding_mask)
        return pooled


class TicketRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.embed_positions = nn.Embedding(config.max_positions, config.hidden_size)
        self.layers = nn.ModuleList([TicketEncoderLayer(config) for _ in range(config.num_layers)])
        self.final_norm = nn.LayerNorm(config.hidden_size)
        self.queue_pool = QueueAttentionPool(config)
        self.queue_score = nn.Linear(config.hidden_size, 1)
        self.urgency_head = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask):
        token_keep = attention_mask.bool()
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden_states = self.embed_tokens(input_ids) + self.embed_positions(positions)[None]
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=token_keep)
        hidden_states = self.final_norm(hidden_states)
        queue_logits = self.queue_score(self.queue_pool(hidden_states, ~token_keep)).squeeze(-1)
        weights = token_keep.unsqueeze(-1).to(hidden_states.dtype)
        mean_pooled = (hidden_states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return queue_logits, self.urgency_head(mean_pooled)

    def training_step(self, batch):
        queue_logits, urgency_logits = self(batch["input_ids"], batch["attention_mask"])
        return F.cross_entropy(queue_logits, batch["queue"]) + 0.5 * F.cross_entropy(urgency_logits, batch["urgent"])

    @torch.no_grad()
    def validation_step(self, batch):
        queue_logits, urgency_logits = self(batch["input_ids"], batch["attention_mask"])
        return {
            "queue_acc": (queue_logits.argmax(-1) == batch["queue"]).float().mean().item(),
            "urgent_acc": (urgency_logits.argmax(-1) == batch["urgent"]).float().mean().item(),
        }

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.config.lr, weight_decay=0.01)


def collate(tokenizer, examples):
    batch = tokenizer([text for text, _, _ in examples])
    batch["queue"] = torch.tensor([q for _, q, _ in examples])
    batch["urgent"] = torch.tensor([u for _, _, u in examples])
    return batch


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    train = [make_ticket(rng) for _ in range(1600)]
    valid = [make_ticket(rng) for _ in range(400)]
    tokenizer = TicketTokenizer([t for t, _, _ in train + valid])
    config = RouterConfig(vocab_size=len(tokenizer.vocab))
    model = TicketRouter(config)
    optimizer = model.configure_optimizers()
    for epoch in range(4):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for start in range(0, len(train), 32):
            loss = model.training_step(collate(tokenizer, train[start : start + 32]))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item()
        model.eval()
        metrics = [model.validation_step(collate(tokenizer, valid[s : s + 100])) for s in range(0, len(valid), 100)]
        queue_acc = sum(m["queue_acc"] for m in metrics) / len(metrics)
        urgent_acc = sum(m["urgent_acc"] for m in metrics) / len(metrics)
        print(f"epoch {epoch} loss {total / (len(train) // 32):.3f} queue_acc {queue_acc:.3f} urgent_acc {urgent_acc:.3f}")
    sample = "hi my package delivery is late please help asap"
    model.eval()
    with torch.no_grad():
        queue_logits, urgency_logits = model(**tokenizer([sample]))
    print("routed to", QUEUES[queue_logits.argmax(-1).item()], "urgent" if urgency_logits.argmax(-1).item() else "normal")


if __name__ == "__main__":
    main()
