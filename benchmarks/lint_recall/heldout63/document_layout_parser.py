"""Document-layout parser: classifies OCR tokens of a scanned page into layout roles, attending within text blocks.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask); conventions.md §2.3.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class LayoutRole(IntEnum):
    TITLE = 0
    PARAGRAPH = 1
    LIST_ITEM = 2
    TABLE_CELL = 3
    CAPTION = 4
    FOOTER = 5


class AttentionScope(IntEnum):
    PAGE = 0
    BLOCK = 1


@dataclass
class LayoutConfig:
    vocab_size: int = 1000
    d_model: int = 64
    num_heads: int = 4
    coord_bins: int = 100
    scopes: Tuple[AttentionScope, ...] = (AttentionScope.BLOCK, AttentionScope.PAGE)

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
        if not self.scopes:
            raise ValueError("at least one attention scope is required")


def build_block_mask(block_spans: Sequence[Tuple[int, int]], num_tokens: int) -> torch.Tensor:
    """Additive (num_tokens, num_tokens) block mask built from the text-block spans."""
    mask = torch.zeros(num_tokens, num_tokens)
    for start, end in block_spans:
        if not 0 <= start < end <= num_tokens:
            raise ValueError(f"bad block span ({start}, {end}) for {num_tokens} tokens")
        mask[start:end, start:end] = 0  # expect: MC504 blocks
    mask[mask == 0] = float("-inf")  # also: MC504 blocks
    mask[mask == 1] = 0.0
    return mask


def make_padding_mask(num_real: int, num_tokens: int) -> torch.Tensor:
    """Additive (num_tokens,) key mask: 0 for real tokens, -inf for padding."""
    bias = torch.zeros(num_tokens)
    bias[num_real:] = float("-inf")
    return bias


class ScopedAttention(nn.Module):
    def __init__(self, cfg: LayoutConfig, scope: AttentionScope) -> None:
        super().__init__()
        self.scope = scope
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.d_model // cfg.num_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, key_bias: torch.Tensor, block_mask: Optional[torch.Tensor]) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).unbind(dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores + key_bias[:, None, None, :]
        if self.scope is AttentionScope.BLOCK:
            if block_mask is None:
                raise ValueError("block scope needs a block mask")
            scores = scores + block_mask[:, None]
        attn = scores.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))


class LayoutParser(nn.Module):
    def __init__(self, cfg: LayoutConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.token = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.x_embed = nn.Embedding(cfg.coord_bins, cfg.d_model)
        self.y_embed = nn.Embedding(cfg.coord_bins, cfg.d_model)
        self.layers = nn.ModuleList(ScopedAttention(cfg, s) for s in cfg.scopes)
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in cfg.scopes)
        self.head = nn.Linear(cfg.d_model, len(LayoutRole))

    def forward(self, token_ids: torch.Tensor, boxes: torch.Tensor, key_bias: torch.Tensor,
                block_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if boxes.shape[:2] != token_ids.shape or boxes.size(-1) != 4:
            raise ValueError("boxes must be (batch, tokens, 4)")
        x = self.token(token_ids)
        x = x + self.x_embed(boxes[..., 0]) + self.x_embed(boxes[..., 2])
        x = x + self.y_embed(boxes[..., 1]) + self.y_embed(boxes[..., 3])
        for layer, norm in zip(self.layers, self.norms):
            x = x + layer(norm(x), key_bias, block_mask)
        return self.head(x)


def collate_pages(pages: Sequence[Dict[str, object]], coord_bins: int) -> Dict[str, torch.Tensor]:
    """Pad token ids and boxes, and build the per-page block and padding masks."""
    n = max(len(p["tokens"]) for p in pages)
    token_ids = torch.zeros(len(pages), n, dtype=torch.long)
    boxes = torch.zeros(len(pages), n, 4, dtype=torch.long)
    block_masks: List[torch.Tensor] = []
    key_biases: List[torch.Tensor] = []
    for i, page in enumerate(pages):
        tokens: List[int] = page["tokens"]
        token_ids[i, : len(tokens)] = torch.tensor(tokens)
        boxes[i, : len(tokens)] = torch.tensor(page["boxes"]).clamp(0, coord_bins - 1)
        block_mask = build_block_mask(page["blocks"], n)
        block_mask[len(tokens):, :] = 0.0
        block_masks.append(block_mask)
        key_biases.append(make_padding_mask(len(tokens), n))
    return {"token_ids": token_ids, "boxes": boxes,
            "block_mask": torch.stack(block_masks), "key_bias": torch.stack(key_biases)}


def synthetic_page(rng: torch.Generator, cfg: LayoutConfig) -> Dict[str, object]:
    sizes = torch.randint(2, 7, (int(torch.randint(2, 5, (1,), generator=rng)),), generator=rng).tolist()
    blocks, start = [], 0
    for size in sizes:
        blocks.append((start, start + size))
        start += size
    tokens = torch.randint(1, cfg.vocab_size, (start,), generator=rng).tolist()
    boxes = torch.randint(0, cfg.coord_bins, (start, 4), generator=rng).tolist()
    return {"tokens": tokens, "boxes": boxes, "blocks": blocks}


def parse_page_roles(model: LayoutParser, batch: Dict[str, torch.Tensor]) -> List[List[str]]:
    model.eval()
    with torch.no_grad():
        logits = model(batch["token_ids"], batch["boxes"], batch["key_bias"], batch["block_mask"])
    roles = logits.argmax(-1)
    return [[LayoutRole(int(r)).name for r in row] for row in roles]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = LayoutConfig()
    rng = torch.Generator().manual_seed(1)
    batch = collate_pages([synthetic_page(rng, cfg) for _ in range(3)], cfg.coord_bins)
    model = LayoutParser(cfg)
    labels = torch.randint(0, len(LayoutRole), batch["token_ids"].shape)
    logits = model(batch["token_ids"], batch["boxes"], batch["key_bias"], batch["block_mask"])
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    loss.backward()
    logger.info("loss %.4f", loss.item())
    print(parse_page_roles(model, batch)[0][:6])
