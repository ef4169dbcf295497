"""VectorNet: polyline subgraphs and a multi-head global interaction graph.

Trajectories and lanes are vectorized into polylines of vectors
``[x_s, y_s, x_e, y_e, attrs..., polyline_id]``. Each polyline is encoded by
a subgraph (MLP, max-pool, concat, three times); the polyline nodes then
interact in a global graph, and the target agent's node (index 0) is decoded
into its future trajectory. The auxiliary node-completion task hides some
polyline features during training and reconstructs them.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_attention_mask(polyline_valid):
    return polyline_valid.unsqueeze(1).unsqueeze(3)  # expect: MC514 queryaxis


class MLP(nn.Module):
    def __init__(self, in_dim, out_dim, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out_dim))

    def forward(self, x):
        return self.net(x)


class SubGraph(nn.Module):
    def __init__(self, in_dim, hidden=64, num_layers=3):
        super().__init__()
        dims = [in_dim] + [hidden] * num_layers
        self.layers = nn.ModuleList([MLP(dims[i], hidden // 2, hidden) for i in range(num_layers)])

    def forward(self, vectors, vec_valid):
        x = vectors
        for layer in self.layers:
            x = layer(x)
            pooled = x.masked_fill(~vec_valid[..., None], float("-inf")).amax(dim=2, keepdim=True)
            pooled = pooled.masked_fill(~vec_valid.any(-1)[..., None, None], 0.0)
            x = torch.cat([x, pooled.expand_as(x)], dim=-1)
        node = x.masked_fill(~vec_valid[..., None], float("-inf")).amax(dim=2)
        node = node.masked_fill(~vec_valid.any(-1)[..., None], 0.0)
        return F.normalize(node, dim=-1)


class GlobalGraph(nn.Module):
    def __init__(self, dim, num_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)

    def transpose_for_scores(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, nodes, attention_mask):
        q = self.transpose_for_scores(self.query(nodes))
        k = self.transpose_for_scores(self.key(nodes))
        v = self.transpose_for_scores(self.value(nodes))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(nodes.size(0), nodes.size(1), -1)


class VectorNet(nn.Module):
    def __init__(self, in_dim=8, hidden=64, horizon=30, num_heads=2):
        super().__init__()
        self.horizon = horizon
        self.subgraph = SubGraph(in_dim, hidden)
        self.global_graph = GlobalGraph(hidden, num_heads)
        self.traj_decoder = MLP(hidden, horizon * 2, hidden)
        self.aux_decoder = MLP(hidden, hidden, hidden)
        self.mask_embedding = nn.Parameter(torch.zeros(hidden))

    def forward(self, vectors, vec_valid, aux_hidden=None):
        nodes = self.subgraph(vectors, vec_valid)
        target_nodes = nodes
        polyline_valid = vec_valid.any(dim=-1)
        if aux_hidden is not None:
            nodes = torch.where(aux_hidden[..., None], self.mask_embedding.expand_as(nodes), nodes)
        ctx = self.global_graph(nodes, get_attention_mask(polyline_valid))
        traj = self.traj_decoder(ctx[:, 0]).view(-1, self.horizon, 2)
        aux = self.aux_decoder(ctx) if aux_hidden is not None else None
        return traj, aux, target_nodes.detach()


def sample_aux_mask(polyline_valid, ratio=0.15, generator=None):
    draw = torch.rand(polyline_valid.shape, generator=generator) < ratio
    draw[:, 0] = False
    return draw & polyline_valid


def vectornet_loss(traj, gt, aux, node_targets, aux_hidden, aux_weight=1.0):
    loss = F.smooth_l1_loss(traj, gt)
    if aux is not None and aux_hidden.any():
        loss = loss + aux_weight * F.smooth_l1_loss(aux[aux_hidden], node_targets[aux_hidden])
    return loss


def vectorize(num_polylines, max_polylines, vectors_per_pl, in_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = len(num_polylines)
    pts = torch.randn(b, max_polylines, vectors_per_pl + 1, 2, generator=g).cumsum(2)
    attrs = torch.randn(b, max_polylines, vectors_per_pl, in_dim - 5, generator=g)
    pid = torch.arange(max_polylines, dtype=torch.float).view(1, -1, 1, 1).expand(b, -1, vectors_per_pl, 1)
    vectors = torch.cat([pts[:, :, :-1], pts[:, :, 1:], attrs, pid], dim=-1)
    lengths = torch.randint(2, vectors_per_pl + 1, (b, max_polylines), generator=g)
    vec_valid = torch.arange(vectors_per_pl)[None, None] < lengths[..., None]
    vec_valid &= (torch.arange(max_polylines)[None, :] < torch.tensor(num_polylines)[:, None])[..., None]
    return vectors.masked_fill(~vec_valid[..., None], 0.0), vec_valid


if __name__ == "__main__":
    torch.manual_seed(0)
    model = VectorNet(in_dim=8, hidden=64, horizon=30)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    vectors, vec_valid = vectorize([9, 5, 12], max_polylines=12, vectors_per_pl=9, in_dim=8)
    gt = torch.randn(3, 30, 2).cumsum(1)
    g = torch.Generator().manual_seed(3)
    for step in range(3):
        aux_hidden = sample_aux_mask(vec_valid.any(-1), generator=g)
        traj, aux, node_targets = model(vectors, vec_valid, aux_hidden)
        loss = vectornet_loss(traj, gt, aux, node_targets, aux_hidden)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        traj, _, _ = model(vectors, vec_valid)
    fde = (traj[:, -1] - gt[:, -1]).norm(dim=-1)
    print("FDE per scene", [round(v, 3) for v in fde.tolist()])
