"""GraphGPS layer (local GINE message passing + global attention) for LRGB
Peptides-struct, with Laplacian eigenvector positional encodings and mean pooling.

Node features come in a flat PyG-style batch (``x``, ``edge_index``, ``batch``);
the global branch densifies them with ``to_dense_batch``.

Source: conventions.md section 1 (scaled_dot_product_attention row), section 2.6,
section 5 item 6.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def to_dense_batch(x, batch, fill_value=0.0):
    num_graphs = int(batch.max()) + 1
    counts = torch.bincount(batch, minlength=num_graphs)
    max_nodes = int(counts.max())
    cum = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])
    idx = torch.arange(batch.numel(), device=x.device) - cum[batch] + batch * max_nodes
    out = x.new_full((num_graphs * max_nodes, x.size(-1)), fill_value)
    out[idx] = x
    mask = torch.zeros(num_graphs * max_nodes, dtype=torch.bool, device=x.device)
    mask[idx] = True
    return out.view(num_graphs, max_nodes, -1), mask.view(num_graphs, max_nodes)


def laplacian_pe(edge_index, num_nodes, k):
    adj = torch.zeros(num_nodes, num_nodes)
    adj[edge_index[0], edge_index[1]] = 1.0
    deg = adj.sum(-1)
    d = deg.clamp(min=1).pow(-0.5)
    lap = torch.eye(num_nodes) - d[:, None] * adj * d[None, :]
    _, vecs = torch.linalg.eigh(lap)
    pe = vecs[:, 1 : k + 1]
    return F.pad(pe, (0, k - pe.size(1)))


class GINEConv(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.edge_lin = nn.Linear(dim, dim)
        self.nn = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index
        msg = F.relu(x[src] + self.edge_lin(edge_attr))
        agg = torch.zeros_like(x).index_add(0, dst, msg)
        return self.nn((1 + self.eps) * x + agg)


class GlobalSelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, h_dense, keep):
        b, n, d = h_dense.shape
        q, k, v = self.qkv(h_dense).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], dropout_p=self.dropout if self.training else 0.0)
        return self.out(o.transpose(1, 2).reshape(b, n, d))


class GPSLayer(nn.Module):
    def __init__(self, dim, heads=4, dropout=0.0):
        super().__init__()
        self.local_model = GINEConv(dim)
        self.self_attn = GlobalSelfAttention(dim, heads, dropout)
        self.norm1_local = nn.BatchNorm1d(dim)
        self.norm1_attn = nn.BatchNorm1d(dim)
        self.norm2 = nn.BatchNorm1d(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, batch):
        h = batch["x"]
        h_local = self.norm1_local(h + self.local_model(h, batch["edge_index"], batch["edge_attr"]))
        h_dense, mask = to_dense_batch(h, batch["batch"])
        h_attn = self.self_attn(h_dense, mask)[mask]
        h_attn = self.norm1_attn(h + h_attn)
        h = h_local + h_attn
        h = self.norm2(h + self.ff(h))
        return dict(batch, x=h)


class GPSModel(nn.Module):
    def __init__(self, in_dim=9, edge_dim=3, pe_dim=4, dim=32, layers=2, targets=11):
        super().__init__()
        self.node_encoder = nn.Linear(in_dim, dim - pe_dim)
        self.pe_encoder = nn.Linear(pe_dim, pe_dim)
        self.edge_encoder = nn.Linear(edge_dim, dim)
        self.layers = nn.ModuleList([GPSLayer(dim) for _ in range(layers)])
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, targets))

    def forward(self, batch):
        x = torch.cat([self.node_encoder(batch["x"]), self.pe_encoder(batch["pe"])], dim=-1)
        batch = dict(batch, x=x, edge_attr=self.edge_encoder(batch["edge_attr"]))
        for layer in self.layers:
            batch = layer(batch)
        num_graphs = int(batch["batch"].max()) + 1
        counts = torch.bincount(batch["batch"], minlength=num_graphs).clamp(min=1)
        pooled = torch.zeros(num_graphs, x.size(-1)).index_add(0, batch["batch"], batch["x"]) / counts[:, None]
        return self.head(pooled)


def peptide_graph(n, generator):
    chain = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    edge_index = torch.cat([chain, chain.flip(0)], dim=1)
    return {
        "x": torch.randn(n, 9, generator=generator),
        "edge_index": edge_index,
        "edge_attr": torch.randn(edge_index.size(1), 3, generator=generator),
        "pe": laplacian_pe(edge_index, n, 4),
    }


def collate(graphs):
    offsets = torch.tensor([0] + [g["x"].size(0) for g in graphs]).cumsum(0)
    return {
        "x": torch.cat([g["x"] for g in graphs]),
        "pe": torch.cat([g["pe"] for g in graphs]),
        "edge_attr": torch.cat([g["edge_attr"] for g in graphs]),
        "edge_index": torch.cat([g["edge_index"] + o for g, o in zip(graphs, offsets)], dim=1),
        "batch": torch.cat([torch.full((g["x"].size(0),), i) for i, g in enumerate(graphs)]),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    sizes = (3, 6, 4, 5, 2, 6)
    batch = collate([peptide_graph(n, g) for n in sizes])
    y = torch.randn(len(sizes), 11, generator=g)
    model = GPSModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = F.l1_loss(model(batch), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("peptides-struct mae", round(loss.item(), 4))
