"""Warehouse robot planner: scores the pick locations an autonomous mobile robot can visit next, attending over the current shelf and robot tokens.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105 (conventions.md §3 item 18); huggingface/lerobot PR #710 (conventions.md §3 item 19); conventions.md §2.3.
"""

from __future__ import annotations

import argparse
import logging
import math
from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class EntityKind(Enum):
    ROBOT = 0
    SHELF = 1
    PICK = 2
    CHARGER = 3
    BLOCKED_AISLE = 4


@dataclass
class PlannerConfig:
    grid_size: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_entities: int = 48
    mixed_precision: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        if self.grid_size <= 1:
            raise ValueError("grid_size must exceed 1")


def make_entity_mask(kinds: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(batch, 1, 1, entities) bool mask, True where an entity must not be attended."""
    hidden = ~valid | (kinds == EntityKind.BLOCKED_AISLE.value)
    return hidden[:, None, None, :]


class EntityAttention(nn.Module):
    def __init__(self, cfg: PlannerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, hidden: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, d = x.shape
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=self.cfg.mixed_precision):
            q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.n_heads)
            if hidden is not None:
                scores = scores.masked_fill(hidden, torch.finfo(scores.dtype).min)
            weights = scores.float().softmax(dim=-1).to(v.dtype)
            out = torch.matmul(weights, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d).float())


class PlannerLayer(nn.Module):
    def __init__(self, cfg: PlannerConfig) -> None:
        super().__init__()
        self.attn = EntityAttention(cfg)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.SiLU(), nn.Linear(2 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, hidden: Optional[torch.Tensor]) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), hidden)
        return x + self.mlp(self.ln2(x))


class PickPlanner(nn.Module):
    def __init__(self, cfg: PlannerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.kind = nn.Embedding(len(EntityKind), cfg.d_model)
        self.xy = nn.Linear(2, cfg.d_model)
        self.extra = nn.Linear(2, cfg.d_model)
        self.layers = nn.ModuleList(PlannerLayer(cfg) for _ in range(cfg.n_layers))
        self.score = nn.Linear(cfg.d_model, 1)

    def forward(self, scene: Dict[str, torch.Tensor]) -> torch.Tensor:
        kinds, valid = scene["kinds"], scene["valid"]
        if kinds.size(1) > self.cfg.max_entities:
            raise ValueError("too many entities in the scene")
        xy = scene["xy"].float() / (self.cfg.grid_size - 1)
        x = self.kind(kinds) + self.xy(xy) + self.extra(scene["extra"])
        hidden = make_entity_mask(kinds, valid)
        for layer in self.layers:
            x = layer(x, hidden)
        logits = self.score(x).squeeze(-1)
        is_pick = valid & (kinds == EntityKind.PICK.value)
        return logits.masked_fill(~is_pick, float("-inf"))


def build_scene(num_shelves: int, num_picks: int, num_blocked: int, cfg: PlannerConfig,
                generator: Optional[torch.Generator] = None) -> Dict[str, torch.Tensor]:
    """One robot, its shelves, open picks and blocked aisles as entity tokens."""
    if num_picks < 1:
        raise ValueError("a scene needs at least one pick")
    kinds = [EntityKind.ROBOT] + [EntityKind.SHELF] * num_shelves + [EntityKind.PICK] * num_picks
    kinds += [EntityKind.BLOCKED_AISLE] * num_blocked
    n = len(kinds)
    return {
        "kinds": torch.tensor([k.value for k in kinds]),
        "xy": torch.randint(0, cfg.grid_size, (n, 2), generator=generator),
        "extra": torch.rand(n, 2, generator=generator),
    }


def batch_scenes(scenes: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    n = max(s["kinds"].numel() for s in scenes)
    out = {"kinds": torch.zeros(len(scenes), n, dtype=torch.long), "xy": torch.zeros(len(scenes), n, 2, dtype=torch.long),
           "extra": torch.zeros(len(scenes), n, 2), "valid": torch.zeros(len(scenes), n, dtype=torch.bool)}
    for i, s in enumerate(scenes):
        m = s["kinds"].numel()
        out["kinds"][i, :m], out["xy"][i, :m], out["extra"][i, :m] = s["kinds"], s["xy"], s["extra"]
        out["valid"][i, :m] = True
    return out


def next_pick(model: PickPlanner, batch: Dict[str, torch.Tensor]) -> List[Tuple[int, float]]:
    model.eval()
    with torch.no_grad():
        probs = model(batch).softmax(-1)
    best = probs.max(-1)
    return list(zip(best.indices.tolist(), best.values.tolist()))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bf16", action="store_true", help="run attention under bfloat16 autocast")
    parser.add_argument("--scenes", type=int, default=3)
    return parser.parse_args()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    args = parse_args()
    torch.manual_seed(0)
    cfg = PlannerConfig(mixed_precision=args.bf16)
    gen = torch.Generator().manual_seed(0)
    scenes = [build_scene(4 + i, 2 + i, i % 2, cfg, gen) for i in range(args.scenes)]
    batch = batch_scenes(scenes)
    model = PickPlanner(cfg)
    target = torch.tensor([int((s["kinds"] == EntityKind.PICK.value).nonzero()[0]) for s in scenes])
    loss = F.cross_entropy(model(batch), target)
    loss.backward()
    logger.info("pick loss %.4f (bf16=%s)", loss.item(), args.bf16)
    print(next_pick(model, batch))
