"""Vision-and-language navigation on Room-to-Room: scoring the navigable candidates of a panorama.

The instruction is tokenized (int64 `attention_mask`, right padding) and encoded by an
`nn.TransformerEncoder`; at each viewpoint the candidate views (image feature plus heading and
elevation) cross-attend to the instruction and a head scores them against a STOP option. Episodes
are a few steps of teacher forcing on synthetic houses; success is choosing the annotated view.

Source: seed self_attention_mask_guide.txt §2, §7 Q1; conventions.md §1 (direction cheat-sheet, HF attention_mask row), §5 item 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


class Direction(StrEnum):
    LEFT = "left"
    RIGHT = "right"
    UP = "up"
    DOWN = "down"
    FORWARD = "forward"


ROOMS = ["kitchen", "bedroom", "hallway", "bathroom", "stairs", "office"]
FILLER = ["walk", "go", "the", "into", "then", "past", "and", "stop", "at", "turn", "toward"]


class Instruction(TypedDict):
    input_ids: Int[Tensor, "b t"]
    attention_mask: Int[Tensor, "b t"]


@dataclass(slots=True, frozen=True)
class AgentConfig:
    vocab: int = len(ROOMS) + len(Direction) + len(FILLER) + 1
    feat: int = 16
    dim: int = 64
    heads: int = 4
    candidates: int = 6


def tokenize(sentences: list[list[str]]) -> Instruction:
    words = ROOMS + list(Direction) + FILLER
    ids = [[words.index(w) + 1 for w in s] for s in sentences]
    width = max(map(len, ids))
    input_ids = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    return Instruction(input_ids=input_ids, attention_mask=(input_ids > 0).long())


class CandidateScorer(nn.Module):
    def __init__(self, cfg: AgentConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.word = nn.Embedding(cfg.vocab, cfg.dim, padding_idx=0)
        self.pos = nn.Embedding(32, cfg.dim)
        layer = nn.TransformerEncoderLayer(cfg.dim, cfg.heads, 2 * cfg.dim, dropout=0.0, batch_first=True)
        self.text = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.view = nn.Linear(cfg.feat + 4, cfg.dim)
        self.q = nn.Linear(cfg.dim, cfg.dim)
        self.kv = nn.Linear(cfg.dim, 2 * cfg.dim)
        self.score = nn.Sequential(nn.Linear(2 * cfg.dim, cfg.dim), nn.Tanh(), nn.Linear(cfg.dim, 1))
        self.stop = nn.Parameter(torch.zeros(cfg.feat + 4))

    def encode_instruction(self, instr: Instruction) -> tuple[Float[Tensor, "b t d"], Bool[Tensor, "b t"]]:
        ids = instr["input_ids"]
        instr_pad = instr["attention_mask"] == 0
        x = self.word(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.text(x, src_key_padding_mask=instr_pad), instr_pad

    def forward(self, instr: Instruction, views: Float[Tensor, "b c f"]) -> Float[Tensor, "b c1"]:
        text, instr_pad = self.encode_instruction(instr)
        views = torch.cat([views, self.stop.expand(views.shape[0], 1, -1)], dim=1)
        v = self.view(views)
        b, c, d = v.shape
        h = self.cfg.heads
        q = self.q(v).view(b, c, h, -1).transpose(1, 2)
        k, val = self.kv(text).view(b, -1, 2, h, d // h).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, val, attn_mask=~instr_pad[:, None, None, :])
        grounded = ctx.transpose(1, 2).reshape(b, c, d)
        return self.score(torch.cat([v, grounded], dim=-1)).squeeze(-1)


def sample_episodes(n: int, cfg: AgentConfig, gen: torch.Generator) -> tuple[Instruction, Tensor, Tensor]:
    room_feat = torch.randn(len(ROOMS), cfg.feat, generator=torch.Generator().manual_seed(7))
    sentences, views, target = [], torch.zeros(n, cfg.candidates, cfg.feat + 4), torch.zeros(n, dtype=torch.long)
    for i in range(n):
        rooms = torch.randperm(len(ROOMS), generator=gen)[: cfg.candidates]
        goal = int(torch.randint(cfg.candidates, (1,), generator=gen))
        turn = list(Direction)[int(torch.randint(len(Direction), (1,), generator=gen))]
        extra = [FILLER[int(j)] for j in torch.randint(len(FILLER), (int(torch.randint(0, 8, (1,), generator=gen)),), generator=gen)]
        sentences.append(["walk", str(turn), "into", "the", ROOMS[int(rooms[goal])], *extra])
        views[i, :, : cfg.feat] = room_feat[rooms] + 0.3 * torch.randn(cfg.candidates, cfg.feat, generator=gen)
        views[i, :, cfg.feat :] = torch.randn(cfg.candidates, 4, generator=gen)
        target[i] = goal
    return tokenize(sentences), views, target


def train(*, steps: int = 200, seed: int = 0) -> float:
    torch.manual_seed(seed)
    cfg = AgentConfig()
    model = CandidateScorer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        instr, views, target = sample_episodes(32, cfg, gen)
        loss = F.cross_entropy(model(instr, views), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        instr, views, target = sample_episodes(500, cfg, torch.Generator().manual_seed(seed + 1))
        return (model(instr, views).argmax(-1) == target).float().mean().item()


if __name__ == "__main__":
    print(f"success rate {train():.3f}")
