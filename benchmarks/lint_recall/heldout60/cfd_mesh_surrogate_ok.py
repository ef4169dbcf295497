"""Transformer surrogate for steady RANS flow around airfoils on unstructured meshes (AirfRANS-style).

Every mesh node carries its position, signed distance to the airfoil and the inflow conditions;
the model predicts the pressure coefficient at every node. Meshes have different node counts and
are padded per batch. The node set is partitioned over ranks (domain decomposition): each rank
holds its partition's nodes as queries and all-gathers keys and values from every partition.
Attention blocks are checkpointed to fit large meshes; without torch.distributed the partitions
run in a loop in this process.

Source: seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3; pytorch/pytorch#103963 (conventions.md §3 item 6)
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

PAD_NODE = 0
FLUID, WALL = 1, 2


def partitions(simulated):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated)), simulated


def gather_partitions(x):
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


class NodeAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm_q, self.norm_kv = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x_part, x_all, node_keep):
        b, n, d = x_part.shape
        q = self.q(self.norm_q(x_part)).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(self.norm_kv(x_all)).view(b, -1, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)).masked_fill(node_keep[:, None, None, :] == 0, float("-inf"))
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, d)
        return x_part + self.out(y)


class MeshSurrogate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.encode = nn.Sequential(nn.Linear(cfg.in_dim, cfg.dim), nn.GELU(), nn.Linear(cfg.dim, cfg.dim))
        self.type_embed = nn.Embedding(3, cfg.dim)
        self.attn = nn.ModuleList(NodeAttention(cfg.dim, cfg.heads) for _ in range(cfg.depth))
        self.ffn = nn.ModuleList(nn.Sequential(nn.LayerNorm(cfg.dim), nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(), nn.Linear(2 * cfg.dim, cfg.dim)) for _ in range(cfg.depth))
        self.decode = nn.Linear(cfg.dim, 1)

    def forward(self, nodes, node_type):
        node_keep = (node_type != PAD_NODE).float()
        x = self.encode(nodes) + self.type_embed(node_type)
        ranks, world = partitions(self.cfg.partitions)
        for attn, ffn in zip(self.attn, self.ffn):
            x_all = gather_partitions(x) if len(ranks) == 1 and world > 1 else x
            parts = [x_all.chunk(world, dim=1)[r] for r in ranks]
            if self.training and self.cfg.checkpoint:
                x = torch.cat([checkpoint(attn, p, x_all, node_keep, use_reentrant=False) for p in parts], 1)
            else:
                x = torch.cat([attn(p, x_all, node_keep) for p in parts], 1)
            x = x + ffn(x)
        return self.decode(x).squeeze(-1)


def synthetic_meshes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    meshes = []
    for _ in range(n):
        count = int(torch.randint(40, 120, (1,), generator=g))
        aoa = (torch.rand(1, generator=g) - 0.5) * 0.3
        speed = 0.5 + torch.rand(1, generator=g)
        xy = torch.rand(count, 2, generator=g) * 4 - 2
        dist_wall = (xy.norm(dim=-1, keepdim=True) - 0.5).clamp(min=0)
        wall = dist_wall.squeeze(-1) < 0.1
        cp = 1 - speed ** 2 * (1 + 2 * aoa * xy[:, 1] / (1 + dist_wall.squeeze(-1)))
        feats = torch.cat([xy, dist_wall, aoa.expand(count, 1), speed.expand(count, 1)], -1)
        types = torch.where(wall, WALL, FLUID)
        meshes.append((feats, types, cp))
    return meshes


def collate(meshes, multiple):
    n = -(-max(len(m[0]) for m in meshes) // multiple) * multiple
    nodes = torch.zeros(len(meshes), n, meshes[0][0].shape[1])
    node_type = torch.full((len(meshes), n), PAD_NODE, dtype=torch.long)
    target = torch.zeros(len(meshes), n)
    for i, (f, t, cp) in enumerate(meshes):
        nodes[i, : len(f)], node_type[i, : len(f)], target[i, : len(f)] = f, t, cp
    return {"nodes": nodes, "node_type": node_type, "cp": target}


def train(steps=100, seed=0):
    torch.manual_seed(seed)
    cfg = SimpleNamespace(in_dim=5, dim=32, heads=4, depth=2, partitions=2, checkpoint=True)
    model = MeshSurrogate(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    data = synthetic_meshes(256, seed)
    for step in range(steps):
        batch = collate(data[(step * 8) % 256:][:8], cfg.partitions)
        pred = model(batch["nodes"], batch["node_type"])
        real = batch["node_type"] != PAD_NODE
        loss = F.mse_loss(pred[real], batch["cp"][real])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    test = collate(synthetic_meshes(32, seed + 1), cfg.partitions)
    with torch.no_grad():
        pred = model(test["nodes"], test["node_type"])
    real = test["node_type"] != PAD_NODE
    return loss.item(), F.mse_loss(pred[real], test["cp"][real]).item()


if __name__ == "__main__":
    print("train mse %.4f  test mse %.4f" % train())
