"""Graphormer-style HOMO-LUMO gap regressor for PCQM4Mv2-like molecular graphs.

Centrality encoding from node degrees, spatial encoding from shortest-path
distances, a graph token prepended to every molecule and an optional half
precision path used for inference on accelerators.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575
(conventions.md section 3 item 18); conventions.md section 2.3.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_DEGREE = 16
MAX_DIST = 8


def floyd_warshall(adj):
    n = adj.size(0)
    dist = torch.full((n, n), float(MAX_DIST), device=adj.device)
    dist[adj.bool()] = 1.0
    dist.fill_diagonal_(0.0)
    for k in range(n):
        dist = torch.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
    return dist.clamp(max=MAX_DIST).long()


def collate(graphs):
    n_max = max(g["x"].size(0) for g in graphs)
    b = len(graphs)
    x = torch.zeros(b, n_max, dtype=torch.long)
    degree = torch.zeros(b, n_max, dtype=torch.long)
    spatial_pos = torch.full((b, n_max, n_max), MAX_DIST, dtype=torch.long)
    padding = torch.ones(b, n_max, dtype=torch.bool)
    for i, g in enumerate(graphs):
        n = g["x"].size(0)
        x[i, :n] = g["x"]
        degree[i, :n] = g["adj"].sum(-1).clamp(max=MAX_DEGREE - 1)
        spatial_pos[i, :n, :n] = floyd_warshall(g["adj"])
        padding[i, :n] = False
    y = torch.stack([g["y"] for g in graphs])
    return {"x": x, "degree": degree, "spatial_pos": spatial_pos, "padding": padding, "y": y}


class GraphAttnBias(nn.Module):
    def __init__(self, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.spatial_pos_encoder = nn.Embedding(MAX_DIST + 1, num_heads)
        self.graph_token_virtual_distance = nn.Embedding(1, num_heads)

    def forward(self, spatial_pos):
        b, n, _ = spatial_pos.shape
        bias = spatial_pos.new_zeros(b, self.num_heads, n + 1, n + 1, dtype=torch.float)
        bias = bias.to(self.spatial_pos_encoder.weight.dtype)
        bias[:, :, 1:, 1:] = self.spatial_pos_encoder(spatial_pos).permute(0, 3, 1, 2)
        t = self.graph_token_virtual_distance.weight.view(1, self.num_heads, 1)
        bias[:, :, 1:, 0] = bias[:, :, 1:, 0] + t
        bias[:, :, 0, :] = bias[:, :, 0, :] + t
        return bias


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.1):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = dropout

    def forward(self, x, attn_bias, key_padding_mask):
        b, t, c = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2) * self.scaling
        k = self.k_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        attn_weights = q @ k.transpose(-1, -2) + attn_bias
        attn_weights = attn_weights.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(attn_weights.dtype).min)
        attn_probs = F.dropout(attn_weights.softmax(dim=-1), p=self.dropout, training=self.training)
        out = (attn_probs @ v).transpose(1, 2).reshape(b, t, c)
        return self.out_proj(out)


class GraphormerLayer(nn.Module):
    def __init__(self, dim, heads, ffn_dim):
        super().__init__()
        self.self_attn = MultiheadAttention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.final_layer_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)

    def forward(self, x, attn_bias, padding):
        x = x + self.self_attn(self.self_attn_layer_norm(x), attn_bias, padding)
        x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
        return x


class Graphormer(nn.Module):
    def __init__(self, num_atoms=32, dim=32, heads=4, layers=2):
        super().__init__()
        self.atom_encoder = nn.Embedding(num_atoms, dim, padding_idx=0)
        self.in_degree_encoder = nn.Embedding(MAX_DEGREE, dim, padding_idx=0)
        self.graph_token = nn.Embedding(1, dim)
        self.attn_bias = GraphAttnBias(heads)
        self.layers = nn.ModuleList([GraphormerLayer(dim, heads, 2 * dim) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, batch):
        x = self.atom_encoder(batch["x"]) + self.in_degree_encoder(batch["degree"])
        b = x.size(0)
        x = torch.cat([self.graph_token.weight.expand(b, 1, -1), x], dim=1)
        padding = F.pad(batch["padding"], (1, 0), value=False)
        bias = self.attn_bias(batch["spatial_pos"])
        for layer in self.layers:
            x = layer(x, bias, padding)
        return self.head(self.ln(x[:, 0])).squeeze(-1)


def random_molecule(n, generator):
    adj = torch.zeros(n, n)
    for i in range(1, n):
        j = int(torch.randint(0, i, (1,), generator=generator))
        adj[i, j] = adj[j, i] = 1.0
    x = torch.randint(1, 32, (n,), generator=generator)
    return {"x": x, "adj": adj, "y": torch.rand((), generator=generator) * 8}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    batch = collate([random_molecule(n, g) for n in (5, 9, 7)])
    model = Graphormer()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4)
    for step in range(3):
        pred = model(batch)
        loss = F.l1_loss(pred, batch["y"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("train mae", round(loss.item(), 4))
    model.eval()
    if args.fp16:
        model = model.half()
    with torch.no_grad():
        pred = model(batch)
    print("gap", pred.float().tolist())
