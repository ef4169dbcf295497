"""A learned cost model for tensor-program auto-tuning in the style of TLP (ASPLOS 2023).

A candidate schedule of a matmul kernel is the sequence of its schedule primitives (split, reorder,
fuse, vectorize, parallel, unroll, cache_read), each an embedding of the primitive kind plus its
numeric arguments; schedules of different lengths are padded. A transformer regresses the
normalised throughput, trained with a pairwise rank loss; the tuner measures the top-k predicted.

Source: conventions.md §2.9, pytorch/pytorch#103963 (§3 item 6).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, TypeAlias

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


class Primitive(IntEnum):
    PAD = 0
    SPLIT = 1
    REORDER = 2
    FUSE = 3
    VECTORIZE = 4
    PARALLEL = 5
    UNROLL = 6
    CACHE_READ = 7


Attend: TypeAlias = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


@dataclass(slots=True, frozen=True)
class CostModelConfig:
    n_args: int = 4
    dim: int = 64
    heads: int = 4
    layers: int = 2


class ScheduleBatch(NamedTuple):
    kinds: Int[Tensor, "b s"]
    args: Float[Tensor, "b s a"]
    throughput: Float[Tensor, "b"]


def make_attention(head_dim: int) -> Attend:
    scale = 1.0 / math.sqrt(head_dim)

    def attend(q: Tensor, k: Tensor, v: Tensor, pad: Bool[Tensor, "b s"]) -> Tensor:
        scores = (q @ k.transpose(-2, -1)) * scale
        scores = scores + pad[:, None, None, :]  # expect: MC509 closure
        return scores.softmax(dim=-1) @ v

    return attend


class PrimitiveEncoderLayer(nn.Module):
    def __init__(self, cfg: CostModelConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, 2 * cfg.dim), nn.ReLU(), nn.Linear(2 * cfg.dim, cfg.dim))
        self.attend = make_attention(cfg.dim // cfg.heads)

    def forward(self, x: Float[Tensor, "b s d"], pad: Bool[Tensor, "b s"]) -> Float[Tensor, "b s d"]:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        x = x + self.proj(self.attend(q, k, v, pad).transpose(1, 2).reshape(b, s, d))
        return x + self.ff(self.ln2(x))


class TLPCostModel(nn.Module):
    def __init__(self, cfg: CostModelConfig) -> None:
        super().__init__()
        self.kind_emb = nn.Embedding(len(Primitive), cfg.dim, padding_idx=Primitive.PAD)
        self.arg_proj = nn.Linear(cfg.n_args, cfg.dim)
        self.layers = nn.ModuleList(PrimitiveEncoderLayer(cfg) for _ in range(cfg.layers))
        self.head = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.ReLU(), nn.Linear(cfg.dim, 1))

    def forward(self, kinds: Int[Tensor, "b s"], args: Float[Tensor, "b s a"]) -> Float[Tensor, "b"]:
        pad = kinds == Primitive.PAD
        x = self.kind_emb(kinds) + self.arg_proj(args)
        for layer in self.layers:
            x = layer(x, pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1)).squeeze(-1)


def random_schedule(gen: torch.Generator) -> tuple[list[int], list[list[float]], float]:
    kinds, args, score = [], [], 1.0
    tile = 2 ** int(torch.randint(2, 7, (1,), generator=gen))
    kinds.append(Primitive.SPLIT)
    args.append([math.log2(tile), 0.0, 0.0, 0.0])
    score *= 1.0 - abs(math.log2(tile) - 5) / 6
    for prim in (Primitive.REORDER, Primitive.FUSE, Primitive.VECTORIZE, Primitive.PARALLEL, Primitive.UNROLL, Primitive.CACHE_READ):
        if (u := float(torch.rand(1, generator=gen))) < 0.5:
            continue
        factor = 2 ** int(u * 8)
        kinds.append(prim)
        args.append([math.log2(factor), float(prim == Primitive.VECTORIZE), u, 1.0])
        score *= {Primitive.VECTORIZE: 1.6, Primitive.PARALLEL: 1.8, Primitive.UNROLL: 1.0 + 0.1 * math.log2(factor)}.get(prim, 1.1)
    return [int(k) for k in kinds], args, score


def sample_batch(n: int, cfg: CostModelConfig, gen: torch.Generator) -> ScheduleBatch:
    scheds = [random_schedule(gen) for _ in range(n)]
    s = max(len(k) for k, _, _ in scheds)
    kinds = torch.zeros(n, s, dtype=torch.long)
    args = torch.zeros(n, s, cfg.n_args)
    for i, (k, a, _) in enumerate(scheds):
        kinds[i, : len(k)] = torch.tensor(k)
        args[i, : len(k)] = torch.tensor(a)
    tput = torch.tensor([sc for _, _, sc in scheds])
    return ScheduleBatch(kinds, args, tput / tput.max())


def rank_loss(pred: Tensor, target: Tensor) -> Tensor:
    diff = pred[:, None] - pred[None, :]
    sign = torch.sign(target[:, None] - target[None, :])
    return F.softplus(-sign * diff)[sign != 0].mean()


def top_k_recall(model: TLPCostModel, batch: ScheduleBatch, k: int = 8) -> float:
    with torch.no_grad():
        picked = set(model(batch.kinds, batch.args).topk(k).indices.tolist())
    best = set(batch.throughput.topk(k).indices.tolist())
    return len(picked & best) / k


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = CostModelConfig()
    model = TLPCostModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(200):
        batch = sample_batch(64, cfg, gen)
        loss = rank_loss(model(batch.kinds, batch.args), batch.throughput)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank loss {loss.item():.3f} top-8 recall {top_k_recall(model, sample_batch(256, cfg, torch.Generator().manual_seed(1))):.3f}")
