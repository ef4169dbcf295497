"""GATv2 for inductive multi-label node classification on PPI-style tissue graphs.

Each tissue graph is a dense adjacency with self loops (pyGAT layout); graphs
of different sizes are padded into one batch, and micro-F1 is measured on the
real nodes only.

Source: conventions.md section 1 (direction cheat-sheet, values used in the wild),
section 2.3; TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_FEATURES = 50
NUM_LABELS = 121


class GATv2Layer(nn.Module):
    def __init__(self, in_features, out_features, heads, concat=True, dropout=0.0, alpha=0.2):
        super().__init__()
        self.heads = heads
        self.out_features = out_features
        self.concat = concat
        self.dropout = dropout
        self.W_src = nn.Linear(in_features, heads * out_features, bias=False)
        self.W_dst = nn.Linear(in_features, heads * out_features, bias=False)
        self.a = nn.Parameter(torch.empty(heads, out_features))
        self.leakyrelu = nn.LeakyReLU(alpha)
        nn.init.xavier_uniform_(self.a)

    def forward(self, h, adj):
        b, n, _ = h.shape
        g_src = self.W_src(h).view(b, n, self.heads, self.out_features)
        g_dst = self.W_dst(h).view(b, n, self.heads, self.out_features)
        z = self.leakyrelu(g_dst[:, :, None] + g_src[:, None, :])
        e = torch.einsum("bijhf,hf->bhij", z, self.a)
        e = e.masked_fill(adj[:, None] == 0, -9e15)
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.einsum("bhij,bjhf->bihf", attention, g_src)
        if self.concat:
            return F.elu(h_prime.reshape(b, n, -1))
        return h_prime.mean(dim=2)


class GATv2PPI(nn.Module):
    def __init__(self, nfeat=NUM_FEATURES, nhid=32, nclass=NUM_LABELS, heads=(4, 4, 6)):
        super().__init__()
        self.layer1 = GATv2Layer(nfeat, nhid, heads[0])
        self.layer2 = GATv2Layer(nhid * heads[0], nhid, heads[1])
        self.skip2 = nn.Linear(nhid * heads[0], nhid * heads[1])
        self.out = GATv2Layer(nhid * heads[1], nclass, heads[2], concat=False)

    def forward(self, x, adj):
        h = self.layer1(x, adj)
        h = self.layer2(h, adj) + self.skip2(h)
        return self.out(h, adj)


def add_self_loops(adj, node_mask):
    eye = torch.diag_embed(node_mask.to(adj.dtype))
    return ((adj + eye) > 0).to(adj.dtype)


def random_tissue_graph(n, generator, p=0.15):
    upper = (torch.rand(n, n, generator=generator) < p).float().triu(1)
    adj = upper + upper.t()
    x = torch.randn(n, NUM_FEATURES, generator=generator)
    y = (torch.rand(n, NUM_LABELS, generator=generator) < 0.3).float()
    return x, adj, y


def pad_graphs(graphs):
    n = max(x.size(0) for x, _, _ in graphs)
    b = len(graphs)
    X = torch.zeros(b, n, NUM_FEATURES)
    A = torch.zeros(b, n, n)
    Y = torch.zeros(b, n, NUM_LABELS)
    node_mask = torch.zeros(b, n, dtype=torch.bool)
    for i, (x, adj, y) in enumerate(graphs):
        k = x.size(0)
        X[i, :k], A[i, :k, :k], Y[i, :k] = x, adj, y
        node_mask[i, :k] = True
    return X, add_self_loops(A, node_mask), Y, node_mask


def micro_f1(logits, labels, node_mask):
    pred = (logits > 0).float()[node_mask]
    gold = labels[node_mask]
    tp = (pred * gold).sum()
    fp = (pred * (1 - gold)).sum()
    fn = ((1 - pred) * gold).sum()
    return (2 * tp / (2 * tp + fp + fn).clamp(min=1)).item()


def masked_bce(logits, labels, node_mask):
    loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").mean(-1)
    return (loss * node_mask).sum() / node_mask.sum()


def train_epoch(model, opt, graphs, batch_size=2):
    model.train()
    total = 0.0
    for i in range(0, len(graphs), batch_size):
        x, adj, y, node_mask = pad_graphs(graphs[i : i + batch_size])
        loss = masked_bce(model(x, adj), y, node_mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total


@torch.no_grad()
def evaluate(model, graphs):
    model.eval()
    x, adj, y, node_mask = pad_graphs(graphs)
    return micro_f1(model(x, adj), y, node_mask)


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_graphs = [random_tissue_graph(n, g) for n in (12, 9, 15, 7)]
    test_graphs = [random_tissue_graph(n, g) for n in (10, 13)]
    model = GATv2PPI()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for epoch in range(3):
        loss = train_epoch(model, opt, train_graphs)
    print("train loss", round(loss, 4), "test micro-F1", round(evaluate(model, test_graphs), 4))
