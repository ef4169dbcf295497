"""SUMBT-style dialogue state tracker over a small restaurant-booking ontology.

Laid out after SKTBrain/SUMBT: a turn encoder over ``[CLS] user utterance [SEP]``, slot and
value label embeddings from the same encoder, a slot-utterance matching ``MultiheadAttention``
per slot, a GRU over the turns of each dialogue, and value scores from the negative Euclidean
distance to every candidate, trained with cross-entropy and read as joint goal accuracy.

Source: conventions.md §1 (nn.MultiheadAttention row, HF 2-D attention_mask row, direction
cheat-sheet) and §5 item 1, seed self_attention_mask_guide.txt §2 and §7 Q1.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

ONTOLOGY = {
    "restaurant-area": ["none", "centre", "north", "south", "east", "west"],
    "restaurant-food": ["none", "italian", "chinese", "indian", "british"],
    "restaurant-pricerange": ["none", "cheap", "moderate", "expensive"],
}
TEMPLATES = [
    ("i am looking for a {restaurant-pricerange} restaurant", ["restaurant-pricerange"]),
    ("somewhere in the {restaurant-area} please", ["restaurant-area"]),
    ("i would like {restaurant-food} food", ["restaurant-food"]),
    (
        "can you find {restaurant-food} food in the {restaurant-area}",
        ["restaurant-food", "restaurant-area"],
    ),
    (
        "actually make it {restaurant-pricerange} and {restaurant-food}",
        ["restaurant-pricerange", "restaurant-food"],
    ),
    ("thank you that is all", []),
]


@dataclass
class DSTConfig:
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_turns: int = 4
    batch_size: int = 16


class WordTokenizer:
    def __init__(self, corpus: list[str]):
        words = sorted({w for text in corpus for w in text.split()})
        self.vocab = {w: i for i, w in enumerate(["[PAD]", "[CLS]", "[SEP]", "[UNK]", *words])}
        self.pad_token_id = 0

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        ids = [[1, *(self.vocab.get(w, 3) for w in t.split()), 2] for t in texts]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (width - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


class TurnEncoder(nn.Module):
    def __init__(self, vocab_size: int, cfg: DSTConfig):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.hidden_size, padding_idx=0)
        self.pos = nn.Embedding(32, cfg.hidden_size)
        layer = nn.TransformerEncoderLayer(
            cfg.hidden_size, cfg.num_heads, 4 * cfg.hidden_size, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.num_layers, enable_nested_tensor=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embed(input_ids) + self.pos(positions)
        return self.encoder(x, src_key_padding_mask=attention_mask == 0)


class SlotUtteranceMatching(nn.Module):
    def __init__(self, cfg: DSTConfig):
        super().__init__()
        self.attn = nn.MultiheadAttention(cfg.hidden_size, cfg.num_heads, batch_first=True)

    def forward(
        self, slot_queries: torch.Tensor, hidden_states: torch.Tensor, attention_mask: torch.Tensor
    ):
        query = slot_queries.unsqueeze(0).expand(hidden_states.shape[0], -1, -1)
        context, _ = self.attn(query, hidden_states, hidden_states, key_padding_mask=~attention_mask, need_weights=False)
        return context


class BeliefTracker(nn.Module):
    def __init__(self, tokenizer: WordTokenizer, cfg: DSTConfig):
        super().__init__()
        self.tokenizer, self.cfg = tokenizer, cfg
        self.utterance_encoder = TurnEncoder(len(tokenizer.vocab), cfg)
        self.slot_lookup = nn.Embedding(len(ONTOLOGY), cfg.hidden_size)
        self.sum_attn = SlotUtteranceMatching(cfg)
        self.nbt = nn.GRU(cfg.hidden_size, cfg.hidden_size, batch_first=True)
        self.proj = nn.Sequential(
            nn.Linear(cfg.hidden_size, cfg.hidden_size), nn.LayerNorm(cfg.hidden_size)
        )

    def label_embeddings(self) -> list[torch.Tensor]:
        out = []
        for slot, values in ONTOLOGY.items():
            enc = self.tokenizer([f"{slot.split('-')[1]} {v}" for v in values])
            out.append(self.utterance_encoder(enc["input_ids"], enc["attention_mask"])[:, 0])
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        B, T, L = input_ids.shape
        flat_mask = attention_mask.view(B * T, L)
        hidden = self.utterance_encoder(input_ids.view(B * T, L), flat_mask)
        context = self.sum_attn(self.slot_lookup.weight, hidden, flat_mask.bool())
        S = context.shape[1]
        context = context.view(B, T, S, -1).transpose(1, 2).reshape(B * S, T, -1)
        state, _ = self.nbt(context)
        state = self.proj(state).view(B, S, T, -1)
        return [
            -torch.cdist(state[:, s], values.unsqueeze(0).expand(B, -1, -1))
            for s, values in enumerate(self.label_embeddings())
        ]


def sample_dialogue(rng: random.Random, max_turns: int):
    state = dict.fromkeys(ONTOLOGY, "none")
    turns, labels = [], []
    for _ in range(rng.randint(1, max_turns)):
        template, slots = rng.choice(TEMPLATES)
        for slot in slots:
            state[slot] = rng.choice(ONTOLOGY[slot][1:])
        turns.append(template.format(**state))
        labels.append([ONTOLOGY[s].index(state[s]) for s in ONTOLOGY])
    return turns, labels


def collate(dialogues, tokenizer: WordTokenizer, max_turns: int):
    texts, labels = [], []
    for turns, turn_labels in dialogues:
        texts += turns + [""] * (max_turns - len(turns))
        labels += turn_labels + [[-100] * len(ONTOLOGY)] * (max_turns - len(turns))
    enc = tokenizer(texts)
    B = len(dialogues)
    return {
        "input_ids": enc["input_ids"].view(B, max_turns, -1),
        "attention_mask": enc["attention_mask"].view(B, max_turns, -1),
        "labels": torch.tensor(labels).view(B, max_turns, len(ONTOLOGY)),
    }


def joint_goal_accuracy(model: BeliefTracker, batch) -> float:
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"])
    pred = torch.stack([lg.argmax(-1) for lg in logits], dim=-1)
    real = batch["labels"][..., 0] != -100
    return (pred == batch["labels"]).all(-1)[real].float().mean().item()


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), DSTConfig()
    corpus = [t.format(**{s: " ".join(v) for s, v in ONTOLOGY.items()}) for t, _ in TEMPLATES]
    tokenizer = WordTokenizer(corpus + [s.replace("-", " ") for s in ONTOLOGY])
    model = BeliefTracker(tokenizer, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(150):
        dialogues = [sample_dialogue(rng, cfg.max_turns) for _ in range(cfg.batch_size)]
        batch = collate(dialogues, tokenizer, cfg.max_turns)
        logits = model(batch["input_ids"], batch["attention_mask"])
        loss = sum(
            F.cross_entropy(lg.transpose(1, 2), batch["labels"][..., s], ignore_index=-100)
            for s, lg in enumerate(logits)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    test = [sample_dialogue(rng, cfg.max_turns) for _ in range(64)]
    jga = joint_goal_accuracy(model, collate(test, tokenizer, cfg.max_turns))
    print(f"joint goal accuracy {jga:.3f}")
    alone = collate(test[:1], tokenizer, cfg.max_turns)
    with torch.no_grad():
        a = model(alone["input_ids"], alone["attention_mask"])[0][0]
        batched = collate(test[:8], tokenizer, cfg.max_turns)
        b = model(batched["input_ids"], batched["attention_mask"])[0][0]
    print(f"first dialogue alone vs batched: {(a - b).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
