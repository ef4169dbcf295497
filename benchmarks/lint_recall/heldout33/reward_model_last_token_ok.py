"""Pairwise reward model that scores a conversation at its last real token.

Organised like TRL's RewardTrainer with a GPT-2-style sequence classifier: a character tokenizer
returns ``input_ids`` and ``attention_mask``, ``RewardDataCollatorWithPadding`` right-pads the
chosen and rejected halves into ``input_ids_chosen`` / ``attention_mask_chosen`` /
``input_ids_rejected`` / ``attention_mask_rejected``, the backbone runs scaled-dot-product
attention, and ``score`` is read at the last non-pad token as in
``GPT2ForSequenceClassification``. The loss is ``-logsigmoid(r_chosen - r_rejected - margin)``
with a small reward-centering term.

Source: conventions.md §1 (SDPA row, HF 2-D attention_mask row, direction cheat-sheet) and §5 item 1, seed self_attention_mask_guide.txt §2
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class RewardConfig:
    max_length: int = 64
    learning_rate: float = 2e-3
    center_rewards_coefficient: float = 0.01


@dataclass
class BackboneConfig:
    vocab_size: int = 64
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 2
    n_positions: int = 64
    pad_token_id: int = 0


@dataclass
class CharTokenizer:
    alphabet: str = "abcdefghijklmnopqrstuvwxyz .,!?:"
    pad_token_id: int = 0
    vocab: dict = field(init=False)

    def __post_init__(self):
        self.vocab = {ch: i + 2 for i, ch in enumerate(self.alphabet)}

    def __call__(self, text: str, max_length: int) -> dict:
        ids = [self.vocab[ch] for ch in text.lower() if ch in self.vocab][:max_length]
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}


class RewardDataCollatorWithPadding:
    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def _pad(self, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
            mask[i, : len(r["attention_mask"])] = torch.tensor(r["attention_mask"])
        return ids, mask

    def __call__(self, features: list[dict]) -> dict:
        ids_c, mask_c = self._pad([f["chosen"] for f in features])
        ids_r, mask_r = self._pad([f["rejected"] for f in features])
        margin = torch.tensor([f.get("margin", 0.0) for f in features])
        return {
            "input_ids_chosen": ids_c,
            "attention_mask_chosen": mask_c,
            "input_ids_rejected": ids_r,
            "attention_mask_rejected": mask_r,
            "margin": margin,
        }


class SelfAttention(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask=mask)
        return x + self.mlp(self.ln_2(x))


class GPTModel(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        keep = torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool).tril()
        self.register_buffer("causal_keep", keep, persistent=False)

    def _prepare_4d_mask(self, attention_mask: torch.Tensor, seq_len: int) -> torch.Tensor:
        key_mask = attention_mask[:, None, None, :] != 0
        return self.causal_keep[:seq_len, :seq_len] & key_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        hidden = self.wte(input_ids) + self.wpe(torch.arange(T, device=input_ids.device))
        mask = self._prepare_4d_mask(attention_mask, T)
        for block in self.h:
            hidden = block(hidden, mask)
        return self.ln_f(hidden)


class GPTForSequenceClassification(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.config = cfg
        self.transformer = GPTModel(cfg)
        self.score = nn.Linear(cfg.n_embd, 1, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        hidden_states = self.transformer(input_ids, attention_mask=attention_mask)
        logits = self.score(hidden_states).squeeze(-1)
        non_pad_mask = (input_ids != self.config.pad_token_id).to(torch.int32)
        token_indices = torch.arange(input_ids.shape[-1], device=input_ids.device, dtype=torch.int32)
        last_non_pad_token = (token_indices * non_pad_mask).argmax(-1)
        pooled_logits = logits[torch.arange(input_ids.shape[0], device=logits.device), last_non_pad_token]
        return {"logits": pooled_logits}


class RewardTrainer:
    def __init__(self, model: nn.Module, args: RewardConfig):
        self.model = model
        self.args = args
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)

    def compute_loss(self, inputs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rewards_chosen = self.model(input_ids=inputs["input_ids_chosen"], attention_mask=inputs["attention_mask_chosen"])["logits"]
        rewards_rejected = self.model(
            input_ids=inputs["input_ids_rejected"], attention_mask=inputs["attention_mask_rejected"]
        )["logits"]
        loss = -F.logsigmoid(rewards_chosen - rewards_rejected - inputs["margin"]).mean()
        loss = loss + self.args.center_rewards_coefficient * torch.mean((rewards_chosen + rewards_rejected) ** 2)
        return loss, rewards_chosen, rewards_rejected

    def train_step(self, inputs: dict) -> tuple[float, float]:
        self.model.train()
        loss, rc, rr = self.compute_loss(inputs)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item(), (rc > rr).float().mean().item()


POLITE = ["thank you, happy to help.", "sure! here is a short answer.", "good question, let me explain."]
RUDE = ["no.", "figure it out yourself, this is a waste of time.", "whatever"]


def make_pairs(n: int, tok: CharTokenizer, args: RewardConfig, g: torch.Generator) -> list[dict]:
    pairs = []
    for _ in range(n):
        q = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g))
        good = POLITE[int(torch.randint(0, 3, (1,), generator=g))]
        bad = RUDE[int(torch.randint(0, 3, (1,), generator=g))]
        pairs.append({"chosen": tok(f"user: {q} bot: {good}", args.max_length), "rejected": tok(f"user: {q} bot: {bad}", args.max_length)})
    return pairs


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    args, cfg, tok = RewardConfig(), BackboneConfig(), CharTokenizer()
    model = GPTForSequenceClassification(cfg)
    trainer = RewardTrainer(model, args)
    collator = RewardDataCollatorWithPadding(tok.pad_token_id)
    for step in range(40):
        loss, acc = trainer.train_step(collator(make_pairs(16, tok, args, g)))
        if step % 10 == 0 or step == 39:
            print(f"step {step:2d} loss {loss:.4f} accuracy {acc:.2f}")

    model.eval()
    short = tok("user: hi bot: sure!", args.max_length)
    long = tok("user: tell me about the weather today please bot: whatever", args.max_length)
    batch = collator([{"chosen": short, "rejected": long}, {"chosen": long, "rejected": short}])
    with torch.no_grad():
        together = model(batch["input_ids_chosen"], batch["attention_mask_chosen"])["logits"][0]
        ids = torch.tensor([short["input_ids"]])
        alone = model(ids, torch.ones_like(ids))["logits"][0]
    print(f"short reward batched vs alone: {(together - alone).abs().item():.3g}")
    a = tok("user: is it raining bot: sure! here is a short answer.", args.max_length)
    b = tok("user: why sky blue? bot: sure! here is a short answer.", args.max_length)
    pair = collator([{"chosen": a, "rejected": b}])
    with torch.no_grad():
        ra = model(pair["input_ids_chosen"], pair["attention_mask_chosen"])["logits"]
        rb = model(pair["input_ids_rejected"], pair["attention_mask_rejected"])["logits"]
    print(f"same answer after two questions of equal length, reward difference: {(ra - rb).abs().item():.3g}")


if __name__ == "__main__":
    main()
