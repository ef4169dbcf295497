"""Graphormer: molecular property regression with centrality, spatial and edge encodings.

Written in the layout of microsoft/Graphormer (graphormer/data/wrapper.py `preprocess_item` with
a Floyd-Warshall shortest-path matrix, data/collator.py with `pad_attn_bias_unsqueeze` and the
`spatial_pos_max` cut, modules/graphormer_layers.py `GraphNodeFeature` and `GraphAttnBias` with
the graph token's virtual distance, the time-first fairseq-style `MultiheadAttention` with
`attn_bias`, `GraphormerGraphEncoderLayer`, `GraphormerGraphEncoder` and the L1 loss of the
PCQM4M task), on small synthetic molecules.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md §3 items 5 and 22);
conventions.md §2.3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def floyd_warshall(adj: np.ndarray) -> np.ndarray:
    n = adj.shape[0]
    dist = np.where(adj, 1, 510).astype(np.int64)
    np.fill_diagonal(dist, 0)
    for k in range(n):
        dist = np.minimum(dist, dist[:, k : k + 1] + dist[k : k + 1, :])
    return dist


def preprocess_item(atoms, bonds):
    x = torch.tensor(atoms, dtype=torch.long).unsqueeze(-1)
    n = x.size(0)
    adj = torch.zeros([n, n], dtype=torch.bool)
    attn_edge_type = torch.zeros([n, n, 1], dtype=torch.long)
    for i, j, bond in bonds:
        adj[i, j] = adj[j, i] = True
        attn_edge_type[i, j, 0] = attn_edge_type[j, i, 0] = bond
    spatial_pos = torch.from_numpy(floyd_warshall(adj.numpy())).long()
    in_degree = adj.long().sum(dim=1).view(-1)
    return {
        "x": x,
        "attn_bias": torch.zeros([n + 1, n + 1], dtype=torch.float),
        "attn_edge_type": attn_edge_type,
        "spatial_pos": spatial_pos,
        "in_degree": in_degree,
        "out_degree": in_degree,
    }


def pad_attn_bias_unsqueeze(x, padlen):
    xlen = x.size(0)
    if xlen < padlen:
        new_x = x.new_zeros([padlen, padlen], dtype=x.dtype).fill_(float("-inf"))
        new_x[:xlen, :xlen] = x
        new_x[xlen:, :xlen] = 0
        x = new_x
    return x.unsqueeze(0)


def pad_2d(x, padlen, value=0):
    new_x = x.new_full([padlen, *x.shape[1:]], value)
    new_x[: x.size(0)] = x
    return new_x.unsqueeze(0)


def pad_square_unsqueeze(x, padlen):
    new_x = x.new_zeros([padlen, padlen, *x.shape[2:]])
    new_x[: x.size(0), : x.size(1)] = x
    return new_x.unsqueeze(0)


def collator(items, ys, spatial_pos_max=20):
    max_node_num = max(item["x"].size(0) for item in items)
    attn_biases = [item["attn_bias"].clone() for item in items]
    for bias, item in zip(attn_biases, items, strict=True):
        bias[1:, 1:][item["spatial_pos"] >= spatial_pos_max] = float("-inf")
    return {
        "x": torch.cat([pad_2d(item["x"] + 1, max_node_num) for item in items]),
        "attn_bias": torch.cat([pad_attn_bias_unsqueeze(b, max_node_num + 1) for b in attn_biases]),
        "attn_edge_type": torch.cat(
            [pad_square_unsqueeze(item["attn_edge_type"] + 1, max_node_num) for item in items]
        ),
        "spatial_pos": torch.cat(
            [pad_square_unsqueeze(item["spatial_pos"] + 1, max_node_num) for item in items]
        ),
        "in_degree": torch.cat([pad_2d(item["in_degree"] + 1, max_node_num) for item in items]),
        "out_degree": torch.cat([pad_2d(item["out_degree"] + 1, max_node_num) for item in items]),
        "y": torch.tensor(ys, dtype=torch.float),
    }


class GraphNodeFeature(nn.Module):
    def __init__(self, num_atoms, num_degree, hidden_dim):
        super().__init__()
        self.atom_encoder = nn.Embedding(num_atoms + 1, hidden_dim, padding_idx=0)
        self.in_degree_encoder = nn.Embedding(num_degree, hidden_dim, padding_idx=0)
        self.out_degree_encoder = nn.Embedding(num_degree, hidden_dim, padding_idx=0)
        self.graph_token = nn.Embedding(1, hidden_dim)

    def forward(self, batched_data):
        x = batched_data["x"]
        n_graph = x.size(0)
        node_feature = self.atom_encoder(x).sum(dim=-2)
        node_feature = node_feature + self.in_degree_encoder(batched_data["in_degree"])
        node_feature = node_feature + self.out_degree_encoder(batched_data["out_degree"])
        graph_token_feature = self.graph_token.weight.unsqueeze(0).repeat(n_graph, 1, 1)
        return torch.cat([graph_token_feature, node_feature], dim=1)


class GraphAttnBias(nn.Module):
    def __init__(self, num_heads, num_edges, num_spatial):
        super().__init__()
        self.num_heads = num_heads
        self.edge_encoder = nn.Embedding(num_edges + 1, num_heads, padding_idx=0)
        self.spatial_pos_encoder = nn.Embedding(num_spatial, num_heads, padding_idx=0)
        self.graph_token_virtual_distance = nn.Embedding(1, num_heads)

    def forward(self, batched_data):
        attn_bias, spatial_pos = batched_data["attn_bias"], batched_data["spatial_pos"]
        graph_attn_bias = attn_bias.clone().unsqueeze(1).repeat(1, self.num_heads, 1, 1)
        spatial_pos_bias = self.spatial_pos_encoder(spatial_pos).permute(0, 3, 1, 2)
        graph_attn_bias[:, :, 1:, 1:] = graph_attn_bias[:, :, 1:, 1:] + spatial_pos_bias
        t = self.graph_token_virtual_distance.weight.view(1, self.num_heads, 1)
        graph_attn_bias[:, :, 1:, 0] = graph_attn_bias[:, :, 1:, 0] + t
        graph_attn_bias[:, :, 0, :] = graph_attn_bias[:, :, 0, :] + t
        edge_input = self.edge_encoder(batched_data["attn_edge_type"]).mean(-2).permute(0, 3, 1, 2)
        graph_attn_bias[:, :, 1:, 1:] = graph_attn_bias[:, :, 1:, 1:] + edge_input
        return graph_attn_bias + attn_bias.unsqueeze(1)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout_module = nn.Dropout(dropout)

    def forward(self, query, attn_bias=None, key_padding_mask=None, attn_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        src_len = tgt_len
        q = self.q_proj(query) * self.scaling
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = (
            self.k_proj(query)
            .contiguous()
            .view(-1, bsz * self.num_heads, self.head_dim)
            .transpose(0, 1)
        )
        v = (
            self.v_proj(query)
            .contiguous()
            .view(-1, bsz * self.num_heads, self.head_dim)
            .transpose(0, 1)
        )
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_bias is not None:
            attn_weights = attn_weights + attn_bias.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        if attn_mask is not None:
            attn_weights = attn_weights.masked_fill(~attn_mask.unsqueeze(1), torch.finfo(attn_weights.dtype).min)
        if key_padding_mask is not None:
            attn_weights = attn_weights.masked_fill(
                key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf")
            )
        attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_probs = self.dropout_module(F.softmax(attn_weights, dim=-1))
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class GraphormerGraphEncoderLayer(nn.Module):
    def __init__(self, embedding_dim, ffn_embedding_dim, num_attention_heads, dropout=0.1):
        super().__init__()
        self.self_attn = MultiheadAttention(embedding_dim, num_attention_heads, dropout)
        self.self_attn_layer_norm = nn.LayerNorm(embedding_dim)
        self.fc1 = nn.Linear(embedding_dim, ffn_embedding_dim)
        self.fc2 = nn.Linear(ffn_embedding_dim, embedding_dim)
        self.final_layer_norm = nn.LayerNorm(embedding_dim)
        self.dropout_module = nn.Dropout(dropout)

    def forward(self, x, self_attn_bias=None, self_attn_mask=None, self_attn_padding_mask=None):
        residual = x
        x = self.self_attn_layer_norm(x)
        x = self.self_attn(
            x,
            attn_bias=self_attn_bias,
            key_padding_mask=self_attn_padding_mask,
            attn_mask=self_attn_mask,
        )
        x = residual + self.dropout_module(x)
        residual = x
        x = self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return residual + self.dropout_module(x)


@dataclass
class GraphormerConfig:
    num_atoms: int = 16
    num_edges: int = 8
    num_degree: int = 16
    num_spatial: int = 32
    encoder_layers: int = 3
    encoder_embed_dim: int = 32
    encoder_ffn_embed_dim: int = 64
    encoder_attention_heads: int = 4
    dropout: float = 0.1


class GraphormerModel(nn.Module):
    def __init__(self, cfg: GraphormerConfig):
        super().__init__()
        d = cfg.encoder_embed_dim
        self.graph_node_feature = GraphNodeFeature(cfg.num_atoms, cfg.num_degree, d)
        self.graph_attn_bias = GraphAttnBias(
            cfg.encoder_attention_heads, cfg.num_edges, cfg.num_spatial
        )
        self.layers = nn.ModuleList(
            GraphormerGraphEncoderLayer(
                d, cfg.encoder_ffn_embed_dim, cfg.encoder_attention_heads, cfg.dropout
            )
            for _ in range(cfg.encoder_layers)
        )
        self.layer_norm = nn.LayerNorm(d)
        self.embed_out = nn.Linear(d, 1)

    def forward(self, **batched_data):
        data_x = batched_data["x"]
        n_graph = data_x.size(0)
        padding_mask = data_x[:, :, 0].eq(0)
        padding_mask_cls = torch.zeros(
            n_graph, 1, device=padding_mask.device, dtype=padding_mask.dtype
        )
        padding_mask = torch.cat((padding_mask_cls, padding_mask), dim=1)
        node_keep = ~padding_mask
        pair_keep = node_keep.unsqueeze(2) & node_keep.unsqueeze(1)
        h = self.graph_node_feature(batched_data).transpose(0, 1)
        bias = self.graph_attn_bias(batched_data)
        for layer in self.layers:
            h = layer(
                h,
                self_attn_bias=bias,
                self_attn_mask=pair_keep,
                self_attn_padding_mask=padding_mask,
            )
        graph_rep = self.layer_norm(h[0, :, :])
        return self.embed_out(graph_rep).squeeze(-1)


def random_molecule(rng):
    n = int(rng.integers(4, 13))
    atoms = rng.choice([1, 2, 3, 4, 5], size=n, p=[0.6, 0.15, 0.15, 0.05, 0.05]).tolist()
    bonds = [
        (i, int(rng.integers(0, i)), int(rng.choice([1, 2, 3], p=[0.8, 0.15, 0.05])))
        for i in range(1, n)
    ]
    if n > 5 and rng.random() < 0.5:
        bonds.append((n - 1, n - 5, 1))
    item = preprocess_item(atoms, bonds)
    far_pairs = (item["spatial_pos"] == 3) & (item["x"][:, 0] == 3)[:, None]
    y = 0.3 * sum(atoms) / n + 0.5 * far_pairs.sum().item() / n + 0.2 * (len(bonds) - n + 1)
    return item, y


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    data = [random_molecule(rng) for _ in range(400)]
    model = GraphormerModel(GraphormerConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(60):
        idx = rng.choice(300, 32, replace=False)
        batch = collator([data[i][0] for i in idx], [data[i][1] for i in idx])
        y = batch.pop("y")
        loss = F.l1_loss(model(**batch), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} l1 {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = collator([d[0] for d in data[300:]], [d[1] for d in data[300:]])
        y = batch.pop("y")
        print(f"valid mae {F.l1_loss(model(**batch), y).item():.4f}")


if __name__ == "__main__":
    main()
