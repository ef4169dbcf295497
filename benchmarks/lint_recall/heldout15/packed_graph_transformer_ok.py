"""Held-out 15 (correct twin): a graph transformer for molecular property regression on PyTorch Geometric-style
mini-batches: the graphs of a batch are packed into one node set (`x`, `edge_index`, and a
`batch` vector giving each node's graph), global attention runs over the packed nodes with a
block-diagonal bias so that a node sees only its own graph, a Graphormer-like learned bias is
added for bonded pairs, and a mean readout per graph feeds the regression head.

Source: seed guide "块状sparse attention" (`create_block_mask`: a zeros matrix, the blocks written
with 0, then `mask[mask == 0] = float('-inf')`), `maskcheck explain MC504`. The recipe is used here
for the per-graph blocks: writing 0 into a zero matrix changes nothing, so the final line masks
every pair, and SDPA returns zeros for every node.
Twin: the bias starts from `torch.full(..., -inf)` and the blocks are written 0 (the `bias == 0` line is gone).
"""

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn


def block_diagonal_bias(batch: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Additive (num_nodes, num_nodes) bias: 0 inside each graph's block, -inf between graphs."""
    bias = torch.full((num_nodes, num_nodes), float("-inf"), device=batch.device)
    ptr = torch.cat([batch.new_zeros(1), torch.bincount(batch).cumsum(0)])
    for start, end in zip(ptr[:-1].tolist(), ptr[1:].tolist()):
        bias[start:end, start:end] = 0
    return bias


def dense_adjacency(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    adj = torch.zeros(num_nodes, num_nodes, dtype=torch.bool, device=edge_index.device)
    adj[edge_index[0], edge_index[1]] = True
    return adj | adj.T


class GlobalAttentionLayer(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.1):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.edge_bias = nn.Parameter(torch.zeros(heads))  # learned bonus for bonded pairs, per head
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(2 * dim, dim))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, graph_bias: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, 3, self.heads, d // self.heads).permute(1, 2, 0, 3)
        attn_bias = graph_bias[None] + adj[None].to(x.dtype) * self.edge_bias[:, None, None]  # (H, N, N)
        h = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=attn_bias[None].to(q.dtype),
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.out(h[0].transpose(0, 1).reshape(n, d))
        return x + self.ffn(self.norm2(x))


class PackedGraphTransformer(nn.Module):
    def __init__(self, num_atom_types: int = 32, dim: int = 64, heads: int = 4, layers: int = 3):
        super().__init__()
        self.atom_encoder = nn.Embedding(num_atom_types, dim)
        self.layers = nn.ModuleList([GlobalAttentionLayer(dim, heads) for _ in range(layers)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 1))

    def forward(self, atom_types: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        num_nodes = atom_types.shape[0]
        num_graphs = int(batch.max()) + 1
        graph_bias = block_diagonal_bias(batch, num_nodes)
        adj = dense_adjacency(edge_index, num_nodes)
        x = self.atom_encoder(atom_types)
        for layer in self.layers:
            x = layer(x, graph_bias, adj)
        counts = torch.bincount(batch, minlength=num_graphs).clamp(min=1).unsqueeze(-1).to(x.dtype)
        pooled = torch.zeros(num_graphs, x.shape[-1], dtype=x.dtype, device=x.device).index_add_(0, batch, x) / counts
        return self.head(pooled).squeeze(-1)


def collate(graphs) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """graphs: list of (atom_types (n,), edge_index (2, e)); packs them PyG-style."""
    atoms, edges, batch, offset = [], [], [], 0
    for i, (a, e) in enumerate(graphs):
        atoms.append(a)
        edges.append(e + offset)
        batch.append(torch.full((a.shape[0],), i, dtype=torch.long))
        offset += a.shape[0]
    return torch.cat(atoms), torch.cat(edges, dim=1), torch.cat(batch)
