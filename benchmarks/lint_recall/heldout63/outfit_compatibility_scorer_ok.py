"""Outfit compatibility scorer for a fashion store: self-attention over the garments of an outfit, then a compatibility logit.

Source: pytorch/pytorch#103749 (conventions.md §3 item 5); Biohub/esm#299 (conventions.md §3 item 22); conventions.md §2.3.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class Category(Enum):
    TOP = 0
    BOTTOM = 1
    SHOES = 2
    OUTERWEAR = 3
    BAG = 4
    ACCESSORY = 5
    PADDING = 6


@dataclass
class OutfitConfig:
    image_dim: int = 48
    text_dim: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_items: int = 8
    categories: List[Category] = field(default_factory=lambda: list(Category))

    def validate(self) -> "OutfitConfig":
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        if self.max_items < 2:
            raise ValueError("an outfit needs room for at least two items")
        return self


class GarmentEncoder(nn.Module):
    """Fuses image features, title features and the category of each garment."""

    def __init__(self, cfg: OutfitConfig) -> None:
        super().__init__()
        self.image = nn.Linear(cfg.image_dim, cfg.d_model)
        self.text = nn.Linear(cfg.text_dim, cfg.d_model)
        self.category = nn.Embedding(len(cfg.categories), cfg.d_model)

    def forward(self, image: torch.Tensor, text: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        return self.image(image) + self.text(text) + self.category(category)


class ItemSelfAttention(nn.Module):
    def __init__(self, cfg: OutfitConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.d_head = cfg.d_model // cfg.n_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.o = nn.Linear(cfg.d_model, cfg.d_model)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x: torch.Tensor, item_keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)
        if item_keep is not None:
            if item_keep.shape != x.shape[:2]:
                raise ValueError("item_keep must be (batch, items)")
            scores = scores.masked_fill(~item_keep[:, None, None, :], float("-inf"))
        attn = F.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).flatten(2)
        return self.o(out)


class OutfitLayer(nn.Module):
    def __init__(self, cfg: OutfitConfig) -> None:
        super().__init__()
        self.attn = ItemSelfAttention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.GELU(), nn.Linear(2 * cfg.d_model, cfg.d_model))
        self.n1 = nn.LayerNorm(cfg.d_model)
        self.n2 = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor, item_keep: Optional[torch.Tensor]) -> torch.Tensor:
        x = self.n1(x + self.attn(x, item_keep))
        return self.n2(x + self.ff(x))


class CompatibilityScorer(nn.Module):
    def __init__(self, cfg: OutfitConfig) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.encoder = GarmentEncoder(cfg)
        self.layers = nn.ModuleList(OutfitLayer(cfg) for _ in range(cfg.n_layers))
        self.score = nn.Linear(cfg.d_model, 1)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        item_keep = batch.get("item_keep")
        x = self.encoder(batch["image"], batch["text"], batch["category"])
        for layer in self.layers:
            x = layer(x, item_keep)
        if item_keep is None:
            pooled = x.mean(dim=1)
        else:
            w = item_keep.unsqueeze(-1).to(x.dtype)
            pooled = (x * w).sum(1) / w.sum(1).clamp_min(1.0)
        return self.score(pooled).squeeze(-1)


def make_item_keep(num_items: Sequence[int], max_items: int) -> torch.Tensor:
    """(batch, max_items) bool mask, True for real garments."""
    counts = torch.as_tensor(num_items)
    if (counts > max_items).any():
        raise ValueError("an outfit has more items than max_items")
    return torch.arange(max_items)[None, :] < counts[:, None]


def collate_outfits(outfits: Sequence[Dict[str, torch.Tensor]], cfg: OutfitConfig) -> Dict[str, torch.Tensor]:
    b, n = len(outfits), max(o["category"].numel() for o in outfits)
    image = torch.zeros(b, n, cfg.image_dim)
    text = torch.zeros(b, n, cfg.text_dim)
    category = torch.full((b, n), Category.PADDING.value, dtype=torch.long)
    for i, o in enumerate(outfits):
        m = o["category"].numel()
        image[i, :m], text[i, :m], category[i, :m] = o["image"], o["text"], o["category"]
    keep = make_item_keep([o["category"].numel() for o in outfits], n)
    return {"image": image, "text": text, "category": category, "item_keep": keep}


def random_outfit(cfg: OutfitConfig, size: int) -> Dict[str, torch.Tensor]:
    return {
        "image": torch.randn(size, cfg.image_dim),
        "text": torch.randn(size, cfg.text_dim),
        "category": torch.randint(0, Category.PADDING.value, (size,)),
    }


def rank_outfits(model: CompatibilityScorer, outfits: List[Dict[str, torch.Tensor]]) -> List[int]:
    """Indices of the outfits from most to least compatible."""
    model.eval()
    with torch.no_grad():
        scores = model(collate_outfits(outfits, model.cfg))
    return scores.argsort(descending=True).tolist()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = OutfitConfig()
    model = CompatibilityScorer(cfg)
    outfits = [random_outfit(cfg, n) for n in (3, 5, 4, 2)]
    batch = collate_outfits(outfits, cfg)
    labels = torch.tensor([1.0, 0.0, 1.0, 0.0])
    loss = F.binary_cross_entropy_with_logits(model(batch), labels)
    loss.backward()
    logger.info("bce %.4f", loss.item())
    print("ranking:", rank_outfits(model, outfits))
