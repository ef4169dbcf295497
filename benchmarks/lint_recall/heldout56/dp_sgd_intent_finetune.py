"""Differentially private fine-tuning of an intent classifier (DP-SGD in an Opacus-like loop).

Per-example gradients are computed example by example, clipped to `max_grad_norm`, summed,
noised with a Gaussian of `noise_multiplier * max_grad_norm` and averaged over the logical batch;
an RDP accountant reports epsilon at the end. The model is a small `nn.TransformerEncoder` over
a word tokenizer's ids; the tokenizer returns int64 `input_ids` / `attention_mask` like Hugging Face's.

Source: conventions.md §1 (HF attention_mask row), §2.4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

INTENTS = ["card_lost", "transfer_failed", "exchange_rate", "pin_blocked", "refund_pending"]
KEYWORDS = {
    "card_lost": ["lost", "stolen", "card", "missing"],
    "transfer_failed": ["transfer", "failed", "declined", "bank"],
    "exchange_rate": ["rate", "euro", "dollar", "exchange"],
    "pin_blocked": ["pin", "blocked", "locked", "attempts"],
    "refund_pending": ["refund", "merchant", "pending", "return"],
}
COMMON = ["my", "i", "the", "is", "please", "help", "why", "what", "today", "yesterday", "a", "was"]


class TokenBatch(TypedDict):
    input_ids: Int[Tensor, "b t"]
    attention_mask: Int[Tensor, "b t"]


class Accountant(Protocol):
    def step(self, *, noise_multiplier: float, sample_rate: float) -> None: ...
    def epsilon(self, delta: float) -> float: ...


@dataclass
class GaussianRDPAccountant:
    alphas: tuple[float, ...] = (1.5, 2, 4, 8, 16, 32, 64)
    rdp: list[float] = field(default_factory=lambda: [0.0] * 7)

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        self.rdp = [r + 2 * sample_rate**2 * a / noise_multiplier**2 for r, a in zip(self.rdp, self.alphas)]

    def epsilon(self, delta: float) -> float:
        return min(r + math.log(1 / delta) / (a - 1) for r, a in zip(self.rdp, self.alphas))


def tokenize(texts: list[str], vocab: dict[str, int]) -> TokenBatch:
    rows = [[vocab[w] for w in t.split()] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    return TokenBatch(input_ids=ids, attention_mask=(ids != 0).long())


class IntentClassifier(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 48, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Embedding(32, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, len(INTENTS))

    def forward(self, batch: TokenBatch) -> Float[Tensor, "b c"]:
        ids = batch["input_ids"]
        pad = ~batch["attention_mask"]  # expect: MC518 typeddict
        h = self.encoder(self.embed(ids) + self.pos(torch.arange(ids.shape[1])), src_key_padding_mask=pad)
        w = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
        return self.head((h * w).sum(1) / w.sum(1))


@dataclass(slots=True, frozen=True)
class PrivacyConfig:
    max_grad_norm: float = 1.0
    noise_multiplier: float = 0.8
    lr: float = 0.5
    delta: float = 1e-5
    dataset_size: int = 10_000


def dp_step(model: nn.Module, batch: TokenBatch, labels: Tensor, cfg: PrivacyConfig, accountant: Accountant) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    summed = [torch.zeros_like(p) for p in params]
    losses = []
    for i in range(len(labels)):
        one = TokenBatch(input_ids=batch["input_ids"][i : i + 1], attention_mask=batch["attention_mask"][i : i + 1])
        loss = F.cross_entropy(model(one), labels[i : i + 1])
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        scale = min(1.0, cfg.max_grad_norm / (norm.item() + 1e-6))
        for s, g in zip(summed, grads):
            s.add_(g, alpha=scale)
        losses.append(loss.item())
    with torch.no_grad():
        for p, s in zip(params, summed):
            noise = torch.randn_like(p) * cfg.noise_multiplier * cfg.max_grad_norm
            p.sub_(cfg.lr * (s + noise) / len(labels))
    accountant.step(noise_multiplier=cfg.noise_multiplier, sample_rate=len(labels) / cfg.dataset_size)
    return sum(losses) / len(losses)


def sample_messages(n: int, gen: torch.Generator) -> tuple[list[str], Tensor]:
    texts, labels = [], torch.randint(len(INTENTS), (n,), generator=gen)
    for c in labels.tolist():
        words = [KEYWORDS[INTENTS[c]][int(i)] for i in torch.randint(4, (2,), generator=gen)]
        words += [COMMON[int(i)] for i in torch.randint(len(COMMON), (int(torch.randint(1, 9, (1,), generator=gen)),), generator=gen)]
        texts.append(" ".join(words[int(i)] for i in torch.randperm(len(words), generator=gen)))
    return texts, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for ws in KEYWORDS.values() for w in ws} | set(COMMON)))}
    model, cfg, accountant = IntentClassifier(len(vocab) + 1), PrivacyConfig(), GaussianRDPAccountant()
    gen = torch.Generator().manual_seed(0)
    for step in range(30):
        texts, labels = sample_messages(64, gen)
        loss = dp_step(model, tokenize(texts, vocab), labels, cfg, accountant)
    texts, labels = sample_messages(400, torch.Generator().manual_seed(1))
    with torch.no_grad():
        acc = (model(tokenize(texts, vocab)).argmax(-1) == labels).float().mean().item()
    print(f"loss {loss:.3f} accuracy {acc:.3f} epsilon {accountant.epsilon(cfg.delta):.2f} at delta {cfg.delta}")
