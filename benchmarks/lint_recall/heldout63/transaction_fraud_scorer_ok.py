"""Card-transaction fraud scorer: a causal transformer over a cardholder's recent transactions scores each new one.

Source: huggingface/transformers PR #27114 (conventions.md §3 item 15); NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 item 16); conventions.md §2.3, §5 item 4.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)


class Channel(IntEnum):
    PAD = 0
    CHIP = 1
    CONTACTLESS = 2
    ONLINE = 3
    ATM = 4


@dataclass
class FraudConfig:
    num_merchant_categories: int = 64
    num_features: int = 6
    d_model: int = 48
    n_heads: int = 4
    n_layers: int = 2
    history: int = 32
    dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        if self.history < 2:
            raise ValueError("history must hold at least two transactions")


def build_causal_mask(length: int, dtype: torch.dtype, device: Optional[torch.device] = None) -> torch.Tensor:
    """(length, length) additive mask hiding later transactions."""
    future = torch.ones(length, length, dtype=torch.bool, device=device).triu(diagonal=1)
    return torch.zeros(length, length, dtype=dtype, device=device).masked_fill(future, torch.finfo(dtype).min)


def make_padding_mask(channel: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, 1, 1, length) additive mask hiding left-padding slots as keys."""
    padded = channel == Channel.PAD
    bias = torch.zeros(padded.shape, dtype=dtype, device=channel.device).masked_fill(padded, torch.finfo(dtype).min)
    return bias[:, None, None, :]


def combine_masks(causal: torch.Tensor, padding: Optional[torch.Tensor]) -> torch.Tensor:
    if padding is None:
        return causal[None, None]
    return torch.minimum(causal[None, None], padding)


class TransactionAttention(nn.Module):
    def __init__(self, cfg: FraudConfig) -> None:
        super().__init__()
        self.h = cfg.n_heads
        self.dh = cfg.d_model // cfg.n_heads
        self.in_proj = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.in_proj(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.dh) + bias
        probs = torch.softmax(logits, dim=-1)
        return self.out_proj((probs @ v).transpose(1, 2).reshape(b, n, d))


class FraudScorer(nn.Module):
    def __init__(self, cfg: FraudConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.mcc = nn.Embedding(cfg.num_merchant_categories, cfg.d_model)
        self.channel = nn.Embedding(len(Channel), cfg.d_model)
        self.numeric = nn.Linear(cfg.num_features, cfg.d_model)
        self.pos = nn.Parameter(torch.zeros(cfg.history, cfg.d_model))
        self.attn = nn.ModuleList(TransactionAttention(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(cfg.n_layers))
        self.ff = nn.ModuleList(
            nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.ReLU(), nn.Linear(2 * cfg.d_model, cfg.d_model))
            for _ in range(cfg.n_layers)
        )
        self.head = nn.Linear(cfg.d_model, 1)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        mcc, channel, numeric = batch["mcc"], batch["channel"], batch["numeric"]
        n = mcc.size(1)
        if n > self.cfg.history:
            raise ValueError(f"history of {n} exceeds configured {self.cfg.history}")
        x = self.mcc(mcc) + self.channel(channel) + self.numeric(numeric) + self.pos[-n:]
        causal = build_causal_mask(n, self.cfg.dtype, device=mcc.device)
        padding = make_padding_mask(channel, self.cfg.dtype) if bool((channel == Channel.PAD).any()) else None
        bias = combine_masks(causal, padding)
        for attn, norm, ff in zip(self.attn, self.norm, self.ff):
            x = x + attn(norm(x), bias)
            x = x + ff(x)
        return self.head(x).squeeze(-1)


def left_pad_histories(histories: Sequence[Dict[str, torch.Tensor]], cfg: FraudConfig) -> Dict[str, torch.Tensor]:
    """Left-pad so that every cardholder's newest transaction sits in the last slot."""
    n = max(h["mcc"].numel() for h in histories)
    out = {
        "mcc": torch.zeros(len(histories), n, dtype=torch.long),
        "channel": torch.full((len(histories), n), int(Channel.PAD), dtype=torch.long),
        "numeric": torch.zeros(len(histories), n, cfg.num_features),
        "label": torch.zeros(len(histories), n),
    }
    for i, h in enumerate(histories):
        m = h["mcc"].numel()
        for key in out:
            out[key][i, n - m:] = h[key]
    return out


def synthetic_history(cfg: FraudConfig, length: int) -> Dict[str, torch.Tensor]:
    return {
        "mcc": torch.randint(0, cfg.num_merchant_categories, (length,)),
        "channel": torch.randint(1, len(Channel), (length,)),
        "numeric": torch.randn(length, cfg.num_features),
        "label": (torch.rand(length) < 0.1).float(),
    }


def score_latest(model: FraudScorer, batch: Dict[str, torch.Tensor], threshold: float = 0.5) -> List[bool]:
    """Flag the newest transaction of each cardholder."""
    model.eval()
    with torch.no_grad():
        prob = torch.sigmoid(model(batch)[:, -1])
    return (prob > threshold).tolist()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = FraudConfig()
    model = FraudScorer(cfg)
    batch = left_pad_histories([synthetic_history(cfg, n) for n in (10, 4, 7)], cfg)
    real = batch["channel"] != Channel.PAD
    logits = model(batch)
    loss = nn.functional.binary_cross_entropy_with_logits(logits[real], batch["label"][real])
    loss.backward()
    logger.info("bce on real transactions %.4f", loss.item())
    print("flags:", score_latest(model, batch))
