"""Graph transformer with attention restricted to each node's neighbourhood.

Every graph of the batch comes as node features and a dense 0/1 adjacency matrix, padded to
the largest graph. A node may attend along its edges and to itself; the additive mask is laid
out per head, (batch * heads, nodes, nodes), for nn.MultiheadAttention. The readout averages
the real nodes of each graph for a graph-level regression target.

Source: self_attention_mask_guide.txt §6 create_block_mask (seed), conventions.md §1 (nn.MultiheadAttention row)
"""
import torch
import torch.nn as nn


def random_graphs(sizes, max_nodes, feat_dim, p=0.4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(len(sizes), max_nodes, feat_dim)
    adj = torch.zeros(len(sizes), max_nodes, max_nodes, dtype=torch.long)
    for b, n in enumerate(sizes):
        x[b, :n] = torch.randn(n, feat_dim, generator=g)
        a = (torch.rand(n, n, generator=g) < p).long().triu(1)
        adj[b, :n, :n] = a + a.T
    return x, adj


def neighbourhood_mask(adj, num_heads):
    b, n, _ = adj.shape
    mask = torch.full((b, n, n), float("-inf"))
    allowed = adj.bool() | torch.eye(n, dtype=torch.bool)
    mask[allowed] = 0
    return mask.repeat_interleave(num_heads, dim=0)


class GraphLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, h, attn_mask):
        a, _ = self.attn(h, h, h, attn_mask=attn_mask)
        h = self.norm1(h + a)
        return self.norm2(h + self.mlp(h))


class GraphTransformer(nn.Module):
    def __init__(self, feat_dim, dim=32, heads=4, depth=2):
        super().__init__()
        self.heads = heads
        self.inp = nn.Linear(feat_dim, dim)
        self.layers = nn.ModuleList(GraphLayer(dim, heads) for _ in range(depth))
        self.readout = nn.Linear(dim, 1)

    def forward(self, x, adj, num_nodes):
        attn_mask = neighbourhood_mask(adj, self.heads)
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h, attn_mask)
        real = torch.arange(x.size(1))[None, :] < num_nodes[:, None]
        pooled = (h * real[..., None]).sum(1) / num_nodes[:, None]
        return self.readout(pooled).squeeze(-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    sizes = [5, 9, 7, 3]
    x, adj = random_graphs(sizes, max_nodes=9, feat_dim=6)
    num_nodes = torch.tensor(sizes)
    target = adj.sum(dim=(1, 2)).float() / num_nodes
    model = GraphTransformer(feat_dim=6)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(10):
        pred = model(x, adj, num_nodes)
        loss = nn.functional.mse_loss(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}")
