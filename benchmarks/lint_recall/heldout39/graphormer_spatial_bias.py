"""Graphormer-style graph transformer regressing a structural property of small random graphs.

Laid out after microsoft/Graphormer: a collator padding the node features, ``in_degree`` and
``spatial_pos`` (shortest-path distances from Floyd-Warshall, shifted by one so 0 is padding),
``GraphNodeFeature`` with the graph token and the degree encoding, ``GraphAttnBias`` with the
spatial encoding and the graph token's virtual distance, a ``MultiheadAttention`` taking
``attn_bias`` and ``attn_mask``, pre-LN ``GraphormerGraphEncoderLayer`` and an L1 loss as on ZINC.

Source: conventions.md §2.9 and §1 (HF 4-D masks row), transformers
models/llama/modeling_llama.py:eager_attention_forward (quoted in conventions.md §2.9).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GraphormerConfig:
    num_atoms: int = 8
    num_in_degree: int = 8
    num_spatial: int = 16
    embed_dim: int = 64
    num_heads: int = 4
    num_layers: int = 3
    dropout: float = 0.0


def floyd_warshall(adj: torch.Tensor, max_dist: int) -> torch.Tensor:
    n = adj.shape[0]
    dist = torch.full((n, n), float(max_dist))
    dist[adj.bool()] = 1.0
    dist.fill_diagonal_(0.0)
    for k in range(n):
        dist = torch.minimum(dist, dist[:, k : k + 1] + dist[k : k + 1, :])
    return dist.long()


def random_graph(rng: random.Random, cfg: GraphormerConfig) -> dict[str, torch.Tensor]:
    n = rng.randint(5, 14)
    adj = torch.zeros(n, n)
    for i in range(1, n):
        j = rng.randrange(i)
        adj[i, j] = adj[j, i] = 1
    for _ in range(rng.randint(0, 3)):
        i, j = rng.sample(range(n), 2)
        adj[i, j] = adj[j, i] = 1
    dist = floyd_warshall(adj, cfg.num_spatial - 2)
    x = torch.tensor([rng.randint(1, cfg.num_atoms - 1) for _ in range(n)])
    y = dist.float().sum() / (n * (n - 1)) + 0.1 * (x == 1).float().sum()
    return {
        "x": x,
        "in_degree": adj.sum(1).long().clamp(max=cfg.num_in_degree - 1),
        "spatial_pos": dist + 1,
        "y": y,
    }


def collator(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    n = max(len(item["x"]) for item in items)
    x = torch.zeros(len(items), n, dtype=torch.long)
    in_degree = torch.zeros(len(items), n, dtype=torch.long)
    spatial_pos = torch.zeros(len(items), n, n, dtype=torch.long)
    for i, item in enumerate(items):
        k = len(item["x"])
        x[i, :k], in_degree[i, :k], spatial_pos[i, :k, :k] = (
            item["x"],
            item["in_degree"],
            item["spatial_pos"],
        )
    return {
        "x": x,
        "in_degree": in_degree,
        "spatial_pos": spatial_pos,
        "y": torch.stack([it["y"] for it in items]),
    }


class GraphNodeFeature(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.atom_encoder = nn.Embedding(cfg.num_atoms, cfg.embed_dim, padding_idx=0)
        self.in_degree_encoder = nn.Embedding(cfg.num_in_degree, cfg.embed_dim, padding_idx=0)
        self.graph_token = nn.Embedding(1, cfg.embed_dim)

    def forward(self, batched_data: dict[str, torch.Tensor]) -> torch.Tensor:
        node_feature = self.atom_encoder(batched_data["x"]) + self.in_degree_encoder(
            batched_data["in_degree"]
        )
        graph_token = self.graph_token.weight.unsqueeze(0).expand(node_feature.shape[0], -1, -1)
        return torch.cat([graph_token, node_feature], dim=1)


class GraphAttnBias(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.spatial_pos_encoder = nn.Embedding(cfg.num_spatial, cfg.num_heads, padding_idx=0)
        self.graph_token_virtual_distance = nn.Embedding(1, cfg.num_heads)

    def forward(self, batched_data: dict[str, torch.Tensor]) -> torch.Tensor:
        spatial_pos = batched_data["spatial_pos"]
        B, n = spatial_pos.shape[:2]
        graph_attn_bias = spatial_pos.new_zeros(B, self.num_heads, n + 1, n + 1, dtype=torch.float)
        spatial_pos_bias = self.spatial_pos_encoder(spatial_pos).permute(0, 3, 1, 2)
        graph_attn_bias[:, :, 1:, 1:] = graph_attn_bias[:, :, 1:, 1:] + spatial_pos_bias
        t = self.graph_token_virtual_distance.weight.view(1, self.num_heads, 1)
        graph_attn_bias[:, :, 1:, 0] = graph_attn_bias[:, :, 1:, 0] + t
        graph_attn_bias[:, :, 0, :] = graph_attn_bias[:, :, 0, :] + t
        return graph_attn_bias


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj, self.k_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim),
            nn.Linear(embed_dim, embed_dim),
        )
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        query: torch.Tensor,
        attn_bias: torch.Tensor | None,
        attn_mask: torch.Tensor | None = None,
    ):
        B, T, C = query.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = (
            heads(self.q_proj(query) * self.scaling),
            heads(self.k_proj(query)),
            heads(self.v_proj(query)),
        )
        attn_weights = q @ k.transpose(-1, -2)
        if attn_bias is not None:
            attn_weights = attn_weights + attn_bias
        if attn_mask is not None:
            attn_weights = attn_weights + attn_mask  # expect: MC509 graphormer
        attn_probs = self.dropout(F.softmax(attn_weights, dim=-1))
        return self.out_proj((attn_probs @ v).transpose(1, 2).reshape(B, T, C))


class GraphormerGraphEncoderLayer(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.self_attn = MultiheadAttention(cfg.embed_dim, cfg.num_heads, cfg.dropout)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.embed_dim)
        self.fc1, self.fc2 = (
            nn.Linear(cfg.embed_dim, 4 * cfg.embed_dim),
            nn.Linear(4 * cfg.embed_dim, cfg.embed_dim),
        )
        self.final_layer_norm = nn.LayerNorm(cfg.embed_dim)

    def forward(self, x: torch.Tensor, self_attn_bias=None, self_attn_mask=None) -> torch.Tensor:
        x = x + self.self_attn(
            self.self_attn_layer_norm(x), attn_bias=self_attn_bias, attn_mask=self_attn_mask
        )
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class GraphormerGraphEncoder(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.graph_node_feature = GraphNodeFeature(cfg)
        self.graph_attn_bias = GraphAttnBias(cfg)
        self.layers = nn.ModuleList(GraphormerGraphEncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.final_layer_norm = nn.LayerNorm(cfg.embed_dim)

    def forward(self, batched_data: dict[str, torch.Tensor]) -> torch.Tensor:
        padding_mask = batched_data["x"].eq(0)
        padding_mask_cls = padding_mask.new_zeros(padding_mask.shape[0], 1)
        padding_mask = torch.cat([padding_mask_cls, padding_mask], dim=1)
        attn_mask = ~padding_mask[:, None, None, :]
        x = self.graph_node_feature(batched_data)
        attn_bias = self.graph_attn_bias(batched_data)
        for layer in self.layers:
            x = layer(x, self_attn_bias=attn_bias, self_attn_mask=attn_mask)
        return self.final_layer_norm(x)


class GraphormerModel(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        self.encoder = GraphormerGraphEncoder(cfg)
        self.head = nn.Linear(cfg.embed_dim, 1)

    def forward(self, batched_data: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.encoder(batched_data)[:, 0]).squeeze(-1)


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), GraphormerConfig()
    model = GraphormerModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(300):
        batch = collator([random_graph(rng, cfg) for _ in range(32)])
        loss = F.l1_loss(model(batch), batch["y"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} l1 {loss.item():.3f}")
    model.eval()
    test = [random_graph(rng, cfg) for _ in range(128)]
    with torch.no_grad():
        batch = collator(test)
        pred = model(batch)
        alone = model(collator(test[:1]))
    print(f"test MAE {(pred - batch['y']).abs().mean().item():.3f}")
    print(f"first graph alone vs batched: {(alone[0] - pred[0]).abs().item():.2e}")


if __name__ == "__main__":
    main()
