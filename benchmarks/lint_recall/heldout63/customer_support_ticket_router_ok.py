"""Ticket router for a customer-support desk: encodes a ticket and predicts its queue.

Source: conventions.md §1 (direction cheat-sheet; nn.MultiheadAttention and HF attention_mask rows), §5 item 1; seed self_attention_mask_guide.txt §2, §7 Q1.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)


class Queue(str, Enum):
    BILLING = "billing"
    SHIPPING = "shipping"
    ACCOUNT = "account"
    TECHNICAL = "technical"
    RETURNS = "returns"


@dataclass
class RouterConfig:
    vocab_size: int = 512
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    dropout: float = 0.1
    max_length: int = 48
    pad_token_id: int = 0
    queues: List[Queue] = field(default_factory=lambda: list(Queue))

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if self.max_length <= 0:
            raise ValueError("max_length must be positive")


class TicketTokenizer:
    """A hashing tokenizer with a Hugging Face style call signature."""

    def __init__(self, vocab_size: int, max_length: int, pad_token_id: int = 0) -> None:
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.pad_token_id = pad_token_id

    def _encode(self, text: str) -> List[int]:
        words = re.findall(r"[a-z0-9']+", text.lower())
        ids = [1 + (hash(w) % (self.vocab_size - 1)) for w in words]
        return ids[: self.max_length] or [1]

    def __call__(self, texts: List[str], return_tensors: str = "pt") -> Dict[str, torch.Tensor]:
        if return_tensors != "pt":
            raise ValueError("only return_tensors='pt' is supported")
        encoded = [self._encode(t) for t in texts]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(texts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(texts), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class EncoderBlock(nn.Module):
    def __init__(self, cfg: RouterConfig) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.num_heads, dropout=cfg.dropout, batch_first=True)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self.norm1(x)
        if attention_mask is not None:
            attn_out, _ = self.attn(
                h, h, h,
                key_padding_mask=attention_mask == 0,
                need_weights=False,
            )
        else:
            attn_out, _ = self.attn(h, h, h, need_weights=False)
        x = x + self.dropout(attn_out)
        return x + self.dropout(self.ffn(self.norm2(x)))


class TicketRouter(nn.Module):
    def __init__(self, cfg: RouterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_token_id)
        self.pos = nn.Embedding(cfg.max_length, cfg.d_model)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, len(cfg.queues))

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got {tuple(input_ids.shape)}")
        if input_ids.size(1) > self.cfg.max_length:
            raise ValueError("sequence longer than max_length")
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.embed(input_ids) + self.pos(positions)[None]
        for block in self.blocks:
            x = block(x, attention_mask)
        x = self.norm(x)
        if attention_mask is None:
            pooled = x.mean(dim=1)
        else:
            weights = attention_mask.to(x.dtype).unsqueeze(-1)
            pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)


MODEL_REGISTRY: Dict[str, RouterConfig] = {
    "tiny": RouterConfig(d_model=32, num_heads=2, num_layers=1),
    "small": RouterConfig(),
}


def build_router(name: str = "small") -> TicketRouter:
    if name not in MODEL_REGISTRY:
        raise KeyError(f"unknown router size {name!r}; choose from {sorted(MODEL_REGISTRY)}")
    cfg = MODEL_REGISTRY[name]
    logger.info("building router %s with %d queues", name, len(cfg.queues))
    return TicketRouter(cfg)


def route_tickets(model: TicketRouter, tokenizer: TicketTokenizer, texts: List[str]) -> List[Queue]:
    """Return the predicted queue for each ticket."""
    model.eval()
    batch = tokenizer(texts, return_tensors="pt")
    with torch.no_grad():
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])
    return [model.cfg.queues[i] for i in logits.argmax(dim=-1).tolist()]


def train_step(model: TicketRouter, batch: Dict[str, torch.Tensor], labels: torch.Tensor,
               optimizer: torch.optim.Optimizer) -> float:
    model.train()
    logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.item())


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    router = build_router("small")
    tok = TicketTokenizer(router.cfg.vocab_size, router.cfg.max_length, router.cfg.pad_token_id)
    tickets = [
        "I was charged twice for my subscription this month",
        "package never arrived",
        "cannot log in after resetting my password, the app keeps spinning",
        "how do I send back a jacket that does not fit",
    ]
    labels = torch.tensor([0, 1, 2, 4])
    opt = torch.optim.AdamW(router.parameters(), lr=1e-3)
    enc = tok(tickets)
    for step in range(3):
        loss = train_step(router, enc, labels, opt)
        logger.info("step %d loss %.4f", step, loss)
    for ticket, queue in zip(tickets, route_tickets(router, tok, tickets)):
        print(f"{queue.value:>10s} <- {ticket}")
