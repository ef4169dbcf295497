"""Graphormer-style graph regressor in the style of microsoft/Graphormer.

Centrality encoding (in/out-degree embeddings added to the atom embeddings),
spatial encoding (a learned bias per head for each shortest-path distance) and
an edge encoding averaged along the first edge of each pair. Graphs are padded
to the largest one in the batch by ``collator``; node pairs in different
connected components (salts, mixtures) are marked with ``UNREACHABLE``, and the
readout is a mean over the real nodes.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658, conventions.md §2.3 and §5 item 4, tools.md §0 P5
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

UNREACHABLE = 510


@dataclass
class GraphormerConfig:
    num_atoms: int = 64
    num_edges: int = 8
    num_in_degree: int = 16
    num_out_degree: int = 16
    num_spatial: int = 16
    hidden_dim: int = 32
    ffn_dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1


def floyd_warshall(adj):
    n = adj.size(0)
    dist = torch.full((n, n), UNREACHABLE, dtype=torch.long)
    dist[adj.bool()] = 1
    dist.fill_diagonal_(0)
    for k in range(n):
        dist = torch.minimum(dist, dist[:, k: k + 1] + dist[k: k + 1, :])
    return dist.clamp(max=UNREACHABLE)


def preprocess_item(atoms, edges, edge_types):
    n = len(atoms)
    adj = torch.zeros(n, n, dtype=torch.long)
    edge_attr = torch.zeros(n, n, dtype=torch.long)
    for (i, j), t in zip(edges, edge_types):
        adj[i, j] = adj[j, i] = 1
        edge_attr[i, j] = edge_attr[j, i] = t + 1
    return {
        "x": torch.tensor(atoms, dtype=torch.long) + 1,
        "spatial_pos": floyd_warshall(adj),
        "in_degree": adj.sum(0) + 1,
        "out_degree": adj.sum(1) + 1,
        "edge_attr": edge_attr,
    }


def collator(items):
    n_max = max(len(it["x"]) for it in items)
    b = len(items)
    batch = {
        "x": torch.zeros(b, n_max, dtype=torch.long),
        "spatial_pos": torch.full((b, n_max, n_max), UNREACHABLE, dtype=torch.long),
        "in_degree": torch.zeros(b, n_max, dtype=torch.long),
        "out_degree": torch.zeros(b, n_max, dtype=torch.long),
        "edge_attr": torch.zeros(b, n_max, n_max, dtype=torch.long),
        "node_mask": torch.zeros(b, n_max, dtype=torch.bool),
    }
    for i, it in enumerate(items):
        n = len(it["x"])
        batch["x"][i, :n] = it["x"]
        batch["spatial_pos"][i, :n, :n] = it["spatial_pos"]
        batch["in_degree"][i, :n] = it["in_degree"]
        batch["out_degree"][i, :n] = it["out_degree"]
        batch["edge_attr"][i, :n, :n] = it["edge_attr"]
        batch["node_mask"][i, :n] = True
    return batch


class GraphNodeFeature(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.atom_encoder = nn.Embedding(cfg.num_atoms + 1, cfg.hidden_dim, padding_idx=0)
        self.in_degree_encoder = nn.Embedding(cfg.num_in_degree, cfg.hidden_dim, padding_idx=0)
        self.out_degree_encoder = nn.Embedding(cfg.num_out_degree, cfg.hidden_dim, padding_idx=0)

    def forward(self, batch):
        return (self.atom_encoder(batch["x"])
                + self.in_degree_encoder(batch["in_degree"].clamp(max=self.in_degree_encoder.num_embeddings - 1))
                + self.out_degree_encoder(batch["out_degree"].clamp(max=self.out_degree_encoder.num_embeddings - 1)))


class GraphAttnBias(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_spatial = cfg.num_spatial
        self.spatial_pos_encoder = nn.Embedding(cfg.num_spatial + 1, cfg.num_heads)
        self.edge_encoder = nn.Embedding(cfg.num_edges + 1, cfg.num_heads, padding_idx=0)

    def forward(self, batch, dtype):
        spatial_pos = batch["spatial_pos"]
        node_mask = batch["node_mask"]
        spatial_bias = self.spatial_pos_encoder(spatial_pos.clamp(max=self.num_spatial)).permute(0, 3, 1, 2)
        edge_bias = self.edge_encoder(batch["edge_attr"]).permute(0, 3, 1, 2)

        pair = node_mask[:, :, None] & node_mask[:, None, :]
        min_value = torch.finfo(dtype).min
        pad_bias = torch.zeros_like(spatial_bias).masked_fill(~pair[:, None], min_value)
        reach_bias = torch.zeros_like(spatial_bias).masked_fill((spatial_pos == UNREACHABLE)[:, None], min_value)
        mask_bias = pad_bias + reach_bias  # expect: MC513 graphormer
        return spatial_bias + edge_bias + mask_bias


class GraphormerLayer(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_dim // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_dim, 3 * cfg.hidden_dim)
        self.out_proj = nn.Linear(cfg.hidden_dim, cfg.hidden_dim)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.hidden_dim)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden_dim)
        self.fc1 = nn.Linear(cfg.hidden_dim, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.hidden_dim)
        self.dropout = nn.Dropout(cfg.dropout)
        self.attention_dropout = nn.Dropout(cfg.attention_dropout)

    def forward(self, x, attn_bias):
        b, n, d = x.shape
        residual = x
        x = self.self_attn_layer_norm(x)
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attn_weights = q @ k.transpose(-1, -2) * self.head_dim ** -0.5 + attn_bias
        attn_probs = self.attention_dropout(attn_weights.softmax(dim=-1))
        x = (attn_probs @ v).transpose(1, 2).reshape(b, n, d)
        x = residual + self.dropout(self.out_proj(x))
        residual = x
        x = self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return residual + self.dropout(x)


class GraphormerRegressor(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.node_feature = GraphNodeFeature(cfg)
        self.attn_bias = GraphAttnBias(cfg)
        self.layers = nn.ModuleList([GraphormerLayer(cfg) for _ in range(cfg.num_layers)])
        self.final_ln = nn.LayerNorm(cfg.hidden_dim)
        self.head = nn.Linear(cfg.hidden_dim, 1)

    def forward(self, batch):
        x = self.node_feature(batch)
        attn_bias = self.attn_bias(batch, x.dtype)
        for layer in self.layers:
            x = layer(x, attn_bias)
        x = self.final_ln(x)
        keep = batch["node_mask"].unsqueeze(-1).to(x.dtype)
        graph = (x * keep).sum(1) / keep.sum(1)
        return self.head(graph).squeeze(-1)


def random_molecule(g, max_atoms=12):
    n = int(torch.randint(3, max_atoms + 1, (1,), generator=g))
    atoms = torch.randint(0, 10, (n,), generator=g).tolist()
    split = n if torch.rand(1, generator=g) < 0.7 else n - 1
    edges = [(i - 1, i) for i in range(1, split)]
    edges += [(i, j) for i in range(split) for j in range(i + 2, split) if torch.rand(1, generator=g) < 0.1]
    types = torch.randint(0, 4, (len(edges),), generator=g).tolist()
    target = float(sum(atoms)) / n + 0.1 * len(edges)
    return preprocess_item(atoms, edges, types), target


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = [random_molecule(g) for _ in range(64)]
    cfg = GraphormerConfig()
    model = GraphormerRegressor(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(20):
        model.train()
        chunk = data[(step % 4) * 16:(step % 4) * 16 + 16]
        batch = collator([it for it, _ in chunk])
        loss = F.l1_loss(model(batch), torch.tensor([t for _, t in chunk]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("train mae", round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        small = min(data, key=lambda d: len(d[0]["x"]))[0]
        large = max(data, key=lambda d: len(d[0]["x"]))[0]
        alone = model(collator([small]))
        together = model(collator([small, large]))[:1]
        print("alone", alone.tolist(), "batched vs alone:", (alone - together).abs().max().item())
