"""Grading MoonBoard climbing problems from their holds.

A problem on the 2016 MoonBoard is a set of holds on the 11 x 18 grid, each a start, intermediate
or finish hold; problems have 3 to 14 holds and are padded to the largest in the batch. A set
transformer encodes the holds, an attention pooling reads the problem out, and the head predicts
the Font grade (6A+ to 8A). Exact and within-one-grade accuracy are reported.

Source: seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3; pytorch/pytorch#103963 (conventions.md §3 item 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

GRADES = ["6A+", "6B", "6B+", "6C", "6C+", "7A", "7A+", "7B", "7B+", "7C", "7C+", "8A"]
COLUMNS, ROWS = 11, 18


class HoldRole(IntEnum):
    PAD = 0
    START = 1
    MIDDLE = 2
    FINISH = 3


@dataclass(slots=True, frozen=True)
class GraderConfig:
    dim: int = 64
    heads: int = 4
    layers: int = 2


class Problems(NamedTuple):
    col: Int[Tensor, "b n"]
    row: Int[Tensor, "b n"]
    role: Int[Tensor, "b n"]
    grade: Int[Tensor, "b"]


class HoldEncoder(nn.Module):
    def __init__(self, cfg: GraderConfig) -> None:
        super().__init__()
        self.col = nn.Embedding(COLUMNS, cfg.dim)
        self.row = nn.Embedding(ROWS, cfg.dim)
        self.role = nn.Embedding(len(HoldRole), cfg.dim)
        self.attn = nn.ModuleList(nn.MultiheadAttention(cfg.dim, cfg.heads, batch_first=True) for _ in range(cfg.layers))
        self.norm = nn.ModuleList(nn.LayerNorm(cfg.dim) for _ in range(cfg.layers))

    def forward(self, p: Problems) -> tuple[Float[Tensor, "b n d"], Bool[Tensor, "b n"]]:
        pad = p.role == HoldRole.PAD
        x = self.col(p.col) + self.row(p.row) + self.role(p.role)
        for attn, norm in zip(self.attn, self.norm):
            h = norm(x)
            x = x + attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        return x, pad


class AttentionPool(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.score = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def forward(self, x: Float[Tensor, "b n d"], pad: Bool[Tensor, "b n"]) -> Float[Tensor, "b d"]:
        hold_keep = (~pad).float()
        logits = self.score(x).squeeze(-1) * hold_keep  # expect: MC520 pooling
        weights = logits.softmax(dim=-1)
        return torch.einsum("bn,bnd->bd", weights, x)


class RouteGrader(nn.Module):
    def __init__(self, cfg: GraderConfig) -> None:
        super().__init__()
        self.encoder = HoldEncoder(cfg)
        self.pool = AttentionPool(cfg.dim)
        self.head = nn.Linear(cfg.dim, len(GRADES))

    def forward(self, p: Problems) -> Float[Tensor, "b g"]:
        return self.head(self.pool(*self.encoder(p)))


def random_problem(gen: torch.Generator) -> tuple[list[tuple[int, int, int]], int]:
    n = int(torch.randint(3, 15, (1,), generator=gen))
    rows = sorted(torch.randint(0, ROWS, (n,), generator=gen).tolist())
    cols = torch.randint(0, COLUMNS, (n,), generator=gen).tolist()
    holds = [(c, r, HoldRole.START if i == 0 else HoldRole.FINISH if i == n - 1 else HoldRole.MIDDLE) for i, (c, r) in enumerate(zip(cols, rows))]
    reach = max(abs(r2 - r1) + 0.5 * abs(c2 - c1) for (c1, r1, _), (c2, r2, _) in zip(holds, holds[1:]))
    grade = int(min(len(GRADES) - 1, max(0, round(reach - 0.25 * (n - 3)))))
    return holds, grade


def collate(problems: list[tuple[list[tuple[int, int, int]], int]]) -> Problems:
    n = max(len(h) for h, _ in problems)
    col, row, role = (torch.zeros(len(problems), n, dtype=torch.long) for _ in range(3))
    for i, (holds, _) in enumerate(problems):
        col[i, : len(holds)], row[i, : len(holds)], role[i, : len(holds)] = torch.tensor(holds).T
    return Problems(col, row, role, torch.tensor([g for _, g in problems]))


def evaluate(model: RouteGrader, p: Problems) -> tuple[float, float]:
    with torch.no_grad():
        pred = model(p).argmax(-1)
    return (pred == p.grade).float().mean().item(), ((pred - p.grade).abs() <= 1).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = RouteGrader(GraderConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(200):
        batch = collate([random_problem(gen) for _ in range(64)])
        loss = F.cross_entropy(model(batch), batch.grade)
        opt.zero_grad()
        loss.backward()
        opt.step()
    exact, within_one = evaluate(model, collate([random_problem(torch.Generator().manual_seed(s)) for s in range(1, 501)]))
    print(f"loss {loss.item():.3f} exact {exact:.3f} within one grade {within_one:.3f}")
