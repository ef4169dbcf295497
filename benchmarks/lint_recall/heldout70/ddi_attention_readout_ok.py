"""Drug-drug interaction type prediction (DrugBank DDI, 86 classes): a shared GIN
encoder for both drugs, an attention readout per drug graph over its padded nodes,
and co-attention between the two drugs' atoms (SSI-DDI / MR-GNN style).

Source: conventions.md section 1 (direction cheat-sheet), section 2.3; seed
self_attention_mask_guide.txt section 7 (Q3, multiplicative versus additive masks).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_ATOM_FEATURES = 12
NUM_TYPES = 86


class GINLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU(), nn.Linear(dim, dim))
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, x, adj, node_mask):
        b, n, d = x.shape
        h = (1 + self.eps) * x + adj @ x
        h = self.mlp(h.reshape(b * n, d)).view(b, n, d)
        return F.relu(h) * node_mask[..., None]


class AttentionReadout(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, 1, bias=False))

    def forward(self, h, node_mask):
        scores = self.gate(h).squeeze(-1)
        weights = torch.softmax(scores.masked_fill(~node_mask, float("-inf")), dim=-1)
        return torch.einsum("bn,bnd->bd", weights, h)


class CoAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w_q = nn.Linear(dim, dim)
        self.w_k = nn.Linear(dim, dim)

    def forward(self, h_a, mask_a, h_b, mask_b):
        scores = self.w_q(h_a) @ self.w_k(h_b).transpose(1, 2) / h_a.size(-1) ** 0.5
        scores = scores.masked_fill(~mask_b[:, None, :], float("-inf"))
        scores = scores.masked_fill(~mask_a[:, :, None], 0.0)
        return torch.softmax(scores, dim=-1) @ h_b


class DrugEncoder(nn.Module):
    def __init__(self, dim, layers):
        super().__init__()
        self.proj = nn.Linear(NUM_ATOM_FEATURES, dim)
        self.layers = nn.ModuleList([GINLayer(dim) for _ in range(layers)])

    def forward(self, graph):
        h = self.proj(graph["x"]) * graph["node_mask"][..., None]
        for layer in self.layers:
            h = h + layer(h, graph["adj"], graph["node_mask"])
        return h


class DDIModel(nn.Module):
    def __init__(self, dim=32, layers=3):
        super().__init__()
        self.encoder = DrugEncoder(dim, layers)
        self.readout = AttentionReadout(dim)
        self.co_attn = CoAttention(dim)
        self.rel_emb = nn.Embedding(NUM_TYPES, 2 * dim)
        self.head = nn.Sequential(nn.Linear(4 * dim, 2 * dim), nn.PReLU(), nn.Linear(2 * dim, NUM_TYPES))

    def forward(self, drug_a, drug_b):
        h_a = self.encoder(drug_a)
        h_b = self.encoder(drug_b)
        h_a = h_a + self.co_attn(h_a, drug_a["node_mask"], h_b, drug_b["node_mask"])
        h_b = h_b + self.co_attn(h_b, drug_b["node_mask"], h_a, drug_a["node_mask"])
        g_a = self.readout(h_a, drug_a["node_mask"])
        g_b = self.readout(h_b, drug_b["node_mask"])
        return self.head(torch.cat([g_a, g_b, g_a * g_b, (g_a - g_b).abs()], dim=-1))


def random_drug(n, generator):
    adj = torch.zeros(n, n)
    for i in range(1, n):
        j = int(torch.randint(0, i, (1,), generator=generator))
        adj[i, j] = adj[j, i] = 1.0
    return torch.randn(n, NUM_ATOM_FEATURES, generator=generator), adj


def batch_drugs(drugs):
    n = max(x.size(0) for x, _ in drugs)
    x = torch.zeros(len(drugs), n, NUM_ATOM_FEATURES)
    adj = torch.zeros(len(drugs), n, n)
    node_mask = torch.zeros(len(drugs), n, dtype=torch.bool)
    for i, (xi, ai) in enumerate(drugs):
        k = xi.size(0)
        x[i, :k], adj[i, :k, :k] = xi, ai
        node_mask[i, :k] = True
    return {"x": x, "adj": adj, "node_mask": node_mask}


def accuracy(logits, y):
    return (logits.argmax(-1) == y).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    pairs = [(random_drug(a, g), random_drug(b, g)) for a, b in ((9, 4), (6, 11), (13, 7), (5, 5))]
    y = torch.randint(0, NUM_TYPES, (len(pairs),), generator=g)
    drug_a = batch_drugs([p[0] for p in pairs])
    drug_b = batch_drugs([p[1] for p in pairs])
    model = DDIModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=5e-4)
    for step in range(5):
        logits = model(drug_a, drug_b)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        print("ce", round(loss.item(), 4), "acc", accuracy(model(drug_a, drug_b), y))
