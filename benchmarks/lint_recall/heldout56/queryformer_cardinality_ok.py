"""Learned cardinality estimation over physical query plans, after QueryFormer (Zhao et al., VLDB 2022).

A plan is a tree of operators (scans with a predicate selectivity feature, joins, aggregates); its
nodes are flattened in pre-order with a super node in front, and the attention gets a learned bias
per tree distance between two nodes. Plans have different sizes and are padded in the collate
function. The model regresses log cardinality of the root; the metric is the median q-error.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


class Op(IntEnum):
    PAD = 0
    SUPER = 1
    SEQ_SCAN = 2
    INDEX_SCAN = 3
    HASH_JOIN = 4
    NESTED_LOOP = 5
    AGGREGATE = 6


TABLE_ROWS = [2_000_000, 450_000, 80_000, 12_000, 600]
MAX_DIST = 8


@dataclass
class PlanNode:
    op: Op
    table: int = -1
    selectivity: float = 1.0
    children: list[PlanNode] = field(default_factory=list)

    def cardinality(self) -> float:
        match self.op:
            case Op.SEQ_SCAN | Op.INDEX_SCAN:
                return TABLE_ROWS[self.table] * self.selectivity
            case Op.HASH_JOIN | Op.NESTED_LOOP:
                left, right = (c.cardinality() for c in self.children)
                return max(left * right * self.selectivity, 1.0)
            case _:
                return max(self.children[0].cardinality() * self.selectivity, 1.0)


def flatten(root: PlanNode) -> tuple[list[PlanNode], list[int]]:
    nodes, parents = [], []

    def visit(node: PlanNode, parent: int) -> None:
        nodes.append(node)
        parents.append(parent)
        here = len(nodes) - 1
        for child in node.children:
            visit(child, here)

    visit(root, -1)
    return nodes, parents


def tree_distance(parents: list[int]) -> Int[Tensor, "n n"]:
    n = len(parents)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    dist = torch.zeros(n, n, dtype=torch.long)
    for i in range(n):
        for j in range(n):
            a, b, d = i, j, 0
            while a != b:
                a, b, d = (parents[a], b, d + 1) if depth[a] >= depth[b] else (a, parents[b], d + 1)
            dist[i, j] = min(d, MAX_DIST - 2) + 1
    return dist


def collate_plans(plans: list[PlanNode]) -> dict[str, Tensor]:
    flat = [flatten(p) for p in plans]
    n = max(len(nodes) for nodes, _ in flat) + 1
    ops = torch.zeros(len(plans), n, dtype=torch.long)
    feats = torch.zeros(len(plans), n, 3)
    dist = torch.zeros(len(plans), n, n, dtype=torch.long)
    for i, (nodes, parents) in enumerate(flat):
        m = len(nodes)
        ops[i, 0], ops[i, 1 : m + 1] = Op.SUPER, torch.tensor([int(nd.op) for nd in nodes])
        feats[i, 1 : m + 1] = torch.tensor([[math.log1p(TABLE_ROWS[nd.table]) if nd.table >= 0 else 0.0, nd.selectivity, float(nd.table)] for nd in nodes])
        dist[i, 1 : m + 1, 1 : m + 1] = tree_distance(parents)
        dist[i, 0, : m + 1] = dist[i, : m + 1, 0] = MAX_DIST - 1
    node_keep = (ops != Op.PAD).unsqueeze(1).unsqueeze(2)
    target = torch.tensor([math.log(p.cardinality()) for p in plans])
    return {"ops": ops, "feats": feats, "dist": dist, "node_keep": node_keep, "log_card": target}


class TreeBiasedAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dist_bias = nn.Embedding(MAX_DIST, heads)

    def forward(self, x: Float[Tensor, "b n d"], dist: Int[Tensor, "b n n"], node_keep: Bool[Tensor, "..."]) -> Float[Tensor, "b n d"]:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads) + self.dist_bias(dist).permute(0, 3, 1, 2)
        scores = scores.masked_fill(~node_keep, torch.finfo(scores.dtype).min)
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class QueryFormer(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 3) -> None:
        super().__init__()
        self.op_emb = nn.Embedding(len(Op), dim)
        self.feat = nn.Linear(3, dim)
        self.attn = nn.ModuleList(TreeBiasedAttention(dim, heads) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)) for _ in range(layers))
        self.out = nn.Linear(dim, 1)

    def forward(self, batch: dict[str, Tensor]) -> Float[Tensor, "b"]:
        x = self.op_emb(batch["ops"]) + self.feat(batch["feats"])
        for attn, ff in zip(self.attn, self.ff):
            x = x + attn(x, batch["dist"], batch["node_keep"])
            x = x + ff(x)
        return self.out(x[:, 0]).squeeze(-1) * 5.0


def random_plan(gen: torch.Generator, depth: int = 0) -> PlanNode:
    if depth >= 2 or float(torch.rand(1, generator=gen)) < 0.3:
        op = Op.INDEX_SCAN if float(torch.rand(1, generator=gen)) < 0.4 else Op.SEQ_SCAN
        return PlanNode(op, int(torch.randint(len(TABLE_ROWS), (1,), generator=gen)), float(torch.rand(1, generator=gen)) * 0.5 + 1e-3)
    if float(torch.rand(1, generator=gen)) < 0.2:
        return PlanNode(Op.AGGREGATE, selectivity=0.01, children=[random_plan(gen, depth + 1)])
    join = Op.HASH_JOIN if float(torch.rand(1, generator=gen)) < 0.7 else Op.NESTED_LOOP
    return PlanNode(join, selectivity=10 ** -float(torch.rand(1, generator=gen) * 5 + 2), children=[random_plan(gen, depth + 1), random_plan(gen, depth + 1)])


def median_q_error(pred: Tensor, target: Tensor) -> float:
    return torch.exp((pred - target).abs()).median().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = QueryFormer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(150):
        batch = collate_plans([random_plan(gen) for _ in range(32)])
        loss = F.mse_loss(model(batch), batch["log_card"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    test = collate_plans([random_plan(torch.Generator().manual_seed(s)) for s in range(1, 201)])
    with torch.no_grad():
        print(f"train mse {loss.item():.3f}, median q-error {median_q_error(model(test), test['log_card']):.2f}")
