"""pyGAT's graph attention layer, batched over padded molecule graphs by a learner (correct twin).

The widely copied pyGAT `GraphAttentionLayer` (`W`, `a`, `_prepare_attentional_mechanism_input`,
LeakyReLU scores, `torch.where(adj > 0, e, zero_vec)` with `zero_vec = -9e15 * ones`) and `GAT`
with concatenated heads, rewritten for a batch of graphs `(B, N, N)` built from 3-D coordinates
with a distance cutoff, padded to N nodes, with a masked mean readout. In the batched layer the
learner "simplified" pyGAT's `torch.where` to multiplying the scores by the 0/1 adjacency before
the softmax: a non-neighbour's score becomes 0, not a large negative, and it still gets exp(0)
of weight, so every node attends to every node of the padded graph.

Twin: pyGAT's own `torch.where(adj > 0, e, -9e15 * torch.ones_like(e))` before the softmax.

Source: seed self_attention_mask_guide.txt §3 common mistakes ("PyTorch中mask是'加法'而非'乘法'":
a mask is added, not multiplied) and Q3 (additive -inf masks vs multiplying by 0).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BatchedGraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super().__init__()
        self.dropout = dropout
        self.out_features = out_features
        self.concat = concat
        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2 * out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)
        self.leakyrelu = nn.LeakyReLU(alpha)

    def forward(self, h, adj):
        Wh = torch.matmul(h, self.W)  # (B, N, out_features)
        e = self._prepare_attentional_mechanism_input(Wh)  # (B, N, N)
        attention = torch.where(adj > 0, e, -9e15 * torch.ones_like(e))
        attention = F.softmax(attention, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)
        return F.elu(h_prime) if self.concat else h_prime

    def _prepare_attentional_mechanism_input(self, Wh):
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        return self.leakyrelu(Wh1 + Wh2.transpose(-1, -2))  # broadcast add


class GAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout, alpha, nheads):
        super().__init__()
        self.dropout = dropout
        self.attentions = [BatchedGraphAttentionLayer(nfeat, nhid, dropout=dropout, alpha=alpha, concat=True)
                           for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module('attention_{}'.format(i), attention)
        self.out_att = BatchedGraphAttentionLayer(nhid * nheads, nclass, dropout=dropout, alpha=alpha, concat=False)

    def forward(self, x, adj, node_mask):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj) for att in self.attentions], dim=-1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        # masked mean readout over the real atoms of each molecule
        w = node_mask.unsqueeze(-1).to(x.dtype)
        return (x * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)


def build_graph_batch(coords_list, feats_list, cutoff=1.6):
    """Pads molecules to N atoms; adj (B, N, N) is 1.0 between real atoms closer than `cutoff`."""
    N = max(c.size(0) for c in coords_list)
    B, F_in = len(coords_list), feats_list[0].size(-1)
    pos = torch.zeros(B, N, 3)
    x = torch.zeros(B, N, F_in)
    node_mask = torch.zeros(B, N, dtype=torch.bool)
    for i, (c, f) in enumerate(zip(coords_list, feats_list)):
        pos[i, :c.size(0)], x[i, :c.size(0)], node_mask[i, :c.size(0)] = c, f, True
    close = torch.cdist(pos, pos) < cutoff
    pair = node_mask[:, :, None] & node_mask[:, None, :]
    self_loops = torch.eye(N, dtype=torch.bool).expand(B, N, N)
    adj = ((close & pair) | self_loops).float()  # padded atoms keep only their self-loop
    return x, adj, node_mask


if __name__ == "__main__":
    torch.manual_seed(72)
    chain = lambda n: torch.stack([torch.arange(n, dtype=torch.float32) * 1.5, torch.zeros(n), torch.zeros(n)], -1)
    coords, feats = [chain(6), chain(3)], [torch.randn(6, 8), torch.randn(3, 8)]
    model = GAT(nfeat=8, nhid=8, nclass=4, dropout=0.0, alpha=0.2, nheads=2).eval()
    x, adj, node_mask = build_graph_batch(coords, feats)
    with torch.no_grad():
        out = model(x, adj, node_mask)
        x2 = x.clone()
        x2[0, 5] += 3.0  # atom 5 is 6.0 away from atom 0: not a neighbour of atoms 0-3
        first = model.attentions[0](x, adj)[0, 0]
        moved = (model.attentions[0](x2, adj)[0, 0] - first).abs().max().item()
        alone = model(*build_graph_batch(coords[1:], feats[1:]))
    print("atom 0 moved by a non-neighbour:", moved)
    print("small molecule padded vs alone:", (out[1] - alone[0]).abs().max().item())
