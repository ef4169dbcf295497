"""Heads-up no-limit hold'em: a policy and value transformer over the betting history.

A hand is the two hole cards, the board cards dealt so far and the betting actions, one token each,
right-padded to the longest hand of the batch. The policy head scores the legal actions at the
last real token, the value head predicts the chips won. The bot serves a float16 copy.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3 item 18), §2.3.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


class Action(IntEnum):
    PAD = 0
    FOLD = 1
    CHECK = 2
    CALL = 3
    BET_HALF = 4
    BET_POT = 5
    ALL_IN = 6
    STREET = 7


CARD_OFFSET = len(Action)
N_ACTIONS = 6


@dataclass(slots=True, frozen=True)
class PolicyConfig:
    vocab: int = CARD_OFFSET + 52
    dim: int = 64
    heads: int = 4
    layers: int = 2
    max_len: int = 40
    mask_value: float = float("-inf")


class HandBatch(NamedTuple):
    tokens: Int[Tensor, "b t"]
    keep: Bool[Tensor, "b t"]
    legal: Bool[Tensor, "b a"]
    target: Int[Tensor, "b"]


class BettingAttention(nn.Module):
    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Float[Tensor, "b t d"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b t d"]:
        b, t, d = x.shape
        hd = d // self.cfg.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, hd).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        allowed = causal & keep[:, None, None, :]
        scores = scores.masked_fill(~allowed, self.cfg.mask_value)
        ctx = scores.softmax(dim=-1) @ v
        return self.proj(ctx.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = BettingAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: Float[Tensor, "b t d"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b t d"]:
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class HoldemPolicy(nn.Module):
    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim, padding_idx=Action.PAD)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.policy = nn.Linear(cfg.dim, N_ACTIONS)
        self.value = nn.Linear(cfg.dim, 1)

    def forward(self, batch: HandBatch) -> tuple[Float[Tensor, "b a"], Float[Tensor, "b"]]:
        t = batch.tokens.shape[1]
        x = self.tok(batch.tokens) + self.pos(torch.arange(t, device=batch.tokens.device))
        for block in self.blocks:
            x = block(x, batch.keep)
        last = batch.keep.sum(dim=1) - 1
        h = self.ln(x)[torch.arange(x.shape[0]), last]
        logits = self.policy(h).masked_fill(~batch.legal, torch.finfo(h.dtype).min)
        return logits, self.value(h).squeeze(-1)


def deal_hand(gen: torch.Generator) -> tuple[list[int], list[bool], int]:
    cards = torch.randperm(52, generator=gen)[:5].tolist()
    ranks = [c % 13 for c in cards[:2]]
    strength = sum(ranks) + (13 if ranks[0] == ranks[1] else 0)
    history = [Action.CALL, Action.CHECK, Action.STREET] + [Action.CHECK, Action.BET_HALF][: int(torch.randint(0, 3, (1,), generator=gen))]
    tokens = [CARD_OFFSET + c for c in cards[:2]] + [CARD_OFFSET + c for c in cards[2:]] + [int(a) for a in history]
    facing_bet = history[-1] == Action.BET_HALF
    legal = [True, not facing_bet, facing_bet, True, True, strength > 20]
    target = (Action.BET_POT if strength > 22 else Action.CALL if facing_bet else Action.CHECK) - 1
    return tokens, legal, target


def make_batch(n: int, gen: torch.Generator) -> HandBatch:
    hands = [deal_hand(gen) for _ in range(n)]
    t = max(len(tokens) for tokens, _, _ in hands)
    tokens = torch.full((n, t), int(Action.PAD))
    for i, (toks, _, _) in enumerate(hands):
        tokens[i, : len(toks)] = torch.tensor(toks)
    legal = torch.tensor([lg for _, lg, _ in hands])
    target = torch.tensor([tg for _, _, tg in hands])
    return HandBatch(tokens, tokens != Action.PAD, legal, target)


def train(model: HoldemPolicy, *, steps: int = 150, seed: int = 0) -> float:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = make_batch(64, gen)
        logits, _ = model(batch)
        loss = F.cross_entropy(logits, batch.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def serve(model: HoldemPolicy, batch: HandBatch) -> float:
    bot = copy.deepcopy(model).half().eval()
    logits, _ = bot(batch)
    return (logits.argmax(-1) == batch.target).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = HoldemPolicy(PolicyConfig())
    print(f"train loss {train(policy):.3f}")
    print(f"float16 bot accuracy {serve(policy, make_batch(256, torch.Generator().manual_seed(1))):.3f}")
