"""Graph Transformer (Dwivedi & Bresson, benchmarking-gnns layout) for node
classification on SBM PATTERN: attention restricted to the graph's edges, Laplacian
positional encodings with random sign flips, BatchNorm and weighted cross entropy.

Source: conventions.md section 1 (direction cheat-sheet, additive masks), section 2.3;
seed self_attention_mask_guide.txt section 3 (generate_causal_mask), section 7 (Q3).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

POS_ENC_DIM = 4
NUM_CLASSES = 2


def sbm_graph(n, p_in, p_out, generator):
    block = torch.randint(0, 3, (n,), generator=generator)
    same = block[:, None] == block[None, :]
    prob = torch.where(same, torch.full((n, n), p_in), torch.full((n, n), p_out))
    upper = (torch.rand(n, n, generator=generator) < prob).float().triu(1)
    adj = upper + upper.t()
    pattern = torch.zeros(n, dtype=torch.long)
    k = max(2, n // 5)
    pattern[:k] = 1
    adj[:k, :k] = (1 - torch.eye(k))
    features = torch.randint(0, 3, (n,), generator=generator)
    return features, adj, pattern


def lap_positional_encoding(adj, k=POS_ENC_DIM):
    deg = adj.sum(-1).clamp(min=1)
    n_inv = deg.pow(-0.5)
    lap = torch.eye(adj.size(0)) - n_inv[:, None] * adj * n_inv[None, :]
    _, vecs = torch.linalg.eigh(lap)
    return F.pad(vecs[:, 1 : k + 1], (0, max(0, k + 1 - adj.size(0))))


def collate(graphs):
    n = max(a.size(0) for _, a, _ in graphs)
    feats = torch.zeros(len(graphs), n, dtype=torch.long)
    adj = torch.zeros(len(graphs), n, n)
    pe = torch.zeros(len(graphs), n, POS_ENC_DIM)
    labels = torch.full((len(graphs), n), -100, dtype=torch.long)
    for i, (f, a, y) in enumerate(graphs):
        k = a.size(0)
        feats[i, :k], adj[i, :k, :k], labels[i, :k] = f, a, y
        pe[i, :k] = lap_positional_encoding(a)
    return feats, adj, pe, labels


def edge_attention_bias(adj):
    n = adj.size(-1)
    connected = ((adj + torch.eye(n, device=adj.device)) > 0).float()
    return torch.zeros_like(connected).masked_fill(connected == 0, float("-inf"))


class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.Q = nn.Linear(dim, dim)
        self.K = nn.Linear(dim, dim)
        self.V = nn.Linear(dim, dim)

    def forward(self, h, bias):
        b, n, d = h.shape
        q = self.Q(h).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.K(h).view(b, n, self.heads, -1).transpose(1, 2)
        v = self.V(h).view(b, n, self.heads, -1).transpose(1, 2)
        score = (q @ k.transpose(-1, -2) / q.size(-1) ** 0.5).clamp(-5, 5) + bias[:, None]
        return (score.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)


class GraphTransformerLayer(nn.Module):
    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttentionLayer(dim, heads)
        self.O = nn.Linear(dim, dim)
        self.batch_norm1 = nn.BatchNorm1d(dim)
        self.batch_norm2 = nn.BatchNorm1d(dim)
        self.FFN = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.dropout = dropout

    def _bn(self, bn, h):
        return bn(h.reshape(-1, h.size(-1))).view_as(h)

    def forward(self, h, bias):
        h_in = h
        h = F.dropout(self.O(self.attention(h, bias)), self.dropout, self.training)
        h = self._bn(self.batch_norm1, h_in + h)
        h = self._bn(self.batch_norm2, h + self.FFN(h))
        return h


class GraphTransformerNet(nn.Module):
    def __init__(self, in_dim=3, hidden=32, heads=4, layers=3):
        super().__init__()
        self.embedding_h = nn.Embedding(in_dim, hidden)
        self.embedding_lap_pos_enc = nn.Linear(POS_ENC_DIM, hidden)
        self.layers = nn.ModuleList([GraphTransformerLayer(hidden, heads) for _ in range(layers)])
        self.MLP_layer = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, NUM_CLASSES))

    def forward(self, feats, adj, lap_pe):
        if self.training:
            sign = torch.randint(0, 2, (lap_pe.size(0), 1, lap_pe.size(-1))).float() * 2 - 1
            lap_pe = lap_pe * sign
        h = self.embedding_h(feats) + self.embedding_lap_pos_enc(lap_pe)
        bias = edge_attention_bias(adj)
        for layer in self.layers:
            h = layer(h, bias)
        return self.MLP_layer(h)


def weighted_loss(logits, labels):
    valid = labels != -100
    counts = torch.bincount(labels[valid], minlength=NUM_CLASSES).float()
    weight = (counts.sum() - counts) / counts.sum()
    weight = weight * (counts > 0).float()
    return F.cross_entropy(logits.reshape(-1, NUM_CLASSES), labels.reshape(-1), weight=weight, ignore_index=-100)


def accuracy_sbm(logits, labels):
    valid = labels != -100
    pred, gold = logits.argmax(-1)[valid], labels[valid]
    per_class = [(pred[gold == c] == c).float().mean() for c in range(NUM_CLASSES) if (gold == c).any()]
    return 100.0 * torch.stack(per_class).mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    graphs = [sbm_graph(n, 0.5, 0.35, g) for n in (14, 18, 11, 16)]
    feats, adj, pe, labels = collate(graphs)
    model = GraphTransformerNet()
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    for epoch in range(3):
        model.train()
        loss = weighted_loss(model(feats, adj, pe), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        print("loss", round(loss.item(), 4), "weighted acc", round(accuracy_sbm(model(feats, adj, pe), labels), 2))
