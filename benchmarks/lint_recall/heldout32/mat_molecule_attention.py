"""Molecule Attention Transformer (MAT) in the style of ardigen/MAT.

Self-attention is mixed with the molecular graph and the 3-D geometry:
``lambda_attention * softmax(QK^T) + lambda_distance * softmax(-D) +
lambda_adjacency * A``. Each molecule gets a dummy node (far from every atom and
bonded to none); molecules are padded with all-zero feature rows, and the atom
mask is read back from the features as in MAT's ``batch_mask``.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), conventions.md §1 (direction cheat-sheet) and §3 item 27
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MATConfig:
    d_atom: int = 12
    d_model: int = 32
    N: int = 2
    h: int = 4
    N_dense: int = 2
    lambda_attention: float = 0.33
    lambda_distance: float = 0.33
    dropout: float = 0.1
    distance_matrix_kernel: str = "softmax"
    aggregation_type: str = "mean"
    eps: float = 1e-6


def clones(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


def attention(query, key, value, adj_matrix, distances_matrix, mask, lambdas, kernel, dropout=None, eps=1e-6):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(scores.dtype).min)
    p_attn = F.softmax(scores, dim=-1)

    adj_matrix = adj_matrix / (adj_matrix.sum(dim=-1, keepdim=True) + eps)
    p_adj = adj_matrix.unsqueeze(1).repeat(1, query.shape[1], 1, 1)

    if kernel == "softmax":
        dist_bias = (1.0 - mask[:, None, :].float()) * float("-inf")  # expect: MC522 mat
        p_dist = F.softmax(-distances_matrix + dist_bias, dim=-1)
    elif kernel == "exp":
        p_dist = torch.exp(-distances_matrix) * mask[:, None, :]
        p_dist = p_dist / (p_dist.sum(dim=-1, keepdim=True) + eps)
    else:
        raise ValueError(kernel)
    p_dist = p_dist.unsqueeze(1).repeat(1, query.shape[1], 1, 1)

    lambda_attention, lambda_distance, lambda_adjacency = lambdas
    p_weighted = lambda_attention * p_attn + lambda_distance * p_dist + lambda_adjacency * p_adj
    if dropout is not None:
        p_weighted = dropout(p_weighted)
    return torch.matmul(p_weighted, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, cfg: MATConfig):
        super().__init__()
        self.d_k = cfg.d_model // cfg.h
        self.h = cfg.h
        self.linears = clones(nn.Linear(cfg.d_model, cfg.d_model), 4)
        self.dropout = nn.Dropout(p=cfg.dropout)
        lambda_adjacency = 1.0 - cfg.lambda_attention - cfg.lambda_distance
        self.lambdas = (cfg.lambda_attention, cfg.lambda_distance, lambda_adjacency)
        self.kernel = cfg.distance_matrix_kernel
        self.eps = cfg.eps

    def forward(self, query, key, value, adj_matrix, distances_matrix, mask):
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        x, self.attn = attention(query, key, value, adj_matrix, distances_matrix, mask, self.lambdas, self.kernel,
                                 dropout=self.dropout, eps=self.eps)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: MATConfig):
        super().__init__()
        self.self_attn = MultiHeadedAttention(cfg)
        self.feed_forward = nn.Sequential(
            *[m for _ in range(cfg.N_dense - 1) for m in (nn.Linear(cfg.d_model, cfg.d_model), nn.LeakyReLU(0.1),
                                                          nn.Dropout(cfg.dropout))],
            nn.Linear(cfg.d_model, cfg.d_model),
        )
        self.sublayer = clones(SublayerConnection(cfg.d_model, cfg.dropout), 2)

    def forward(self, x, mask, adj_matrix, distances_matrix):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, adj_matrix, distances_matrix, mask))
        return self.sublayer[1](x, self.feed_forward)


class GraphTransformer(nn.Module):
    def __init__(self, cfg: MATConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Sequential(nn.Linear(cfg.d_atom, cfg.d_model), nn.Dropout(cfg.dropout))
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.N)])
        self.norm = nn.LayerNorm(cfg.d_model)
        self.generator = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.LeakyReLU(0.1), nn.Linear(cfg.d_model, 1))

    def forward(self, node_features, adjacency_matrix, distance_matrix):
        batch_mask = torch.sum(torch.abs(node_features), dim=-1) != 0
        x = self.src_embed(node_features)
        for layer in self.layers:
            x = layer(x, batch_mask, adjacency_matrix, distance_matrix)
        out = self.norm(x)
        out_masked = out * batch_mask.unsqueeze(-1)
        if self.cfg.aggregation_type == "mean":
            pooled = out_masked.sum(dim=1) / batch_mask.sum(dim=-1, keepdim=True)
        else:
            pooled = out_masked.sum(dim=1)
        return self.generator(pooled).squeeze(-1)


def featurize(atom_types, coords, d_atom):
    n = len(atom_types) + 1
    features = torch.zeros(n, d_atom)
    features[0, d_atom - 1] = 1.0
    features[torch.arange(1, n), torch.tensor(atom_types)] = 1.0
    features[1:, d_atom - 2] = 1.0
    dist = torch.cdist(coords, coords)
    adjacency = torch.zeros(n, n)
    adjacency[1:, 1:] = ((dist < 1.6) & (dist > 0)).float() + torch.eye(n - 1)
    distances = torch.full((n, n), 1e6)
    distances[1:, 1:] = dist
    distances[0, 0] = 0.0
    return features, adjacency, distances


def mol_collate(molecules):
    n_max = max(f.size(0) for f, _, _ in molecules)
    b, d = len(molecules), molecules[0][0].size(1)
    node_features = torch.zeros(b, n_max, d)
    adjacency = torch.zeros(b, n_max, n_max)
    distances = torch.zeros(b, n_max, n_max)
    for i, (f, a, dist) in enumerate(molecules):
        n = f.size(0)
        node_features[i, :n], adjacency[i, :n, :n], distances[i, :n, :n] = f, a, dist
    return node_features, adjacency, distances


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = MATConfig()
    g = torch.Generator().manual_seed(0)
    molecules, targets = [], []
    for _ in range(48):
        n = int(torch.randint(3, 14, (1,), generator=g))
        steps = torch.randn(n, 3, generator=g)
        coords = torch.cumsum(steps / steps.norm(dim=-1, keepdim=True) * 1.4, dim=0)
        types = torch.randint(0, cfg.d_atom - 2, (n,), generator=g).tolist()
        molecules.append(featurize(types, coords, cfg.d_atom))
        targets.append(sum(types) / n)
    model = GraphTransformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    y = torch.tensor(targets)
    for step in range(20):
        model.train()
        idx = torch.randperm(48, generator=g)[:16]
        batch = mol_collate([molecules[i] for i in idx])
        loss = F.mse_loss(model(*batch), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("train mse", round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        small = min(range(48), key=lambda i: molecules[i][0].size(0))
        large = max(range(48), key=lambda i: molecules[i][0].size(0))
        alone = model(*mol_collate([molecules[small]]))
        together = model(*mol_collate([molecules[small], molecules[large]]))[:1]
        print("alone", alone.tolist(), "batched vs alone:", (alone - together).abs().max().item())
