"""Graph transformer for molecule property regression, ported from JAX / jraph to PyTorch.

The JAX code batches graphs as a `GraphsTuple` padded with `jraph.pad_with_graphs` (one extra
padding graph takes the padding nodes), reads `get_node_padding_mask` / `get_graph_padding_mask`,
densifies nodes per graph and runs full attention biased by an edge-type table. The port keeps
the jraph field names (`nodes`, `senders`, `receivers`, `n_node`) in a namedtuple, turns each bool
mask into an additive bias with `mask_to_bias`, as the original does with `jnp.where`, and
keeps the `dtype` argument.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658, conventions.md §2.3
and §5 item 4, tools.md §0 P5.
"""
from collections import namedtuple

import torch
import torch.nn as nn

GraphsTuple = namedtuple("GraphsTuple", "nodes edges senders receivers n_node n_edge")


def pad_with_graphs(graph, n_node, n_edge):
    pad_nodes = n_node - graph.nodes.shape[0]
    pad_edges = n_edge - graph.senders.shape[0]
    last = graph.nodes.shape[0]
    return GraphsTuple(
        nodes=torch.cat([graph.nodes, torch.zeros(pad_nodes, graph.nodes.shape[1])]),
        edges=torch.cat([graph.edges, torch.zeros(pad_edges, dtype=torch.long)]),
        senders=torch.cat([graph.senders, torch.full((pad_edges,), last)]),
        receivers=torch.cat([graph.receivers, torch.full((pad_edges,), last)]),
        n_node=torch.cat([graph.n_node, torch.tensor([pad_nodes])]),
        n_edge=torch.cat([graph.n_edge, torch.tensor([pad_edges])]),
    )


def get_node_padding_mask(graph):
    n_real = int(graph.n_node[:-1].sum())
    return torch.arange(graph.nodes.shape[0]) < n_real


def get_graph_padding_mask(graph):
    mask = torch.ones(graph.n_node.shape[0], dtype=torch.bool)
    mask[-1] = False
    return mask


def to_dense(graph, node_real, max_nodes):
    graph_index = torch.repeat_interleave(torch.arange(len(graph.n_node)), graph.n_node)
    starts = torch.cumsum(graph.n_node, 0) - graph.n_node
    slot = torch.arange(graph.nodes.shape[0]) - starts[graph_index]
    x = torch.zeros(len(graph.n_node), max_nodes, graph.nodes.shape[1])
    x[graph_index, slot] = graph.nodes
    node_mask = torch.zeros(len(graph.n_node), max_nodes, dtype=torch.bool)
    node_mask[graph_index, slot] = node_real
    edge_type = torch.zeros(len(graph.n_node), max_nodes, max_nodes, dtype=torch.long)
    real_edge = node_real[graph.senders]
    edge_type[graph_index[graph.senders][real_edge], slot[graph.senders][real_edge],
              slot[graph.receivers][real_edge]] = graph.edges[real_edge] + 1
    return x, node_mask, edge_type


def mask_to_bias(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


class GraphAttentionLayer(nn.Module):
    def __init__(self, dim, num_heads, num_edge_types):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.edge_bias = nn.Embedding(num_edge_types + 1, num_heads)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, node_mask, edge_type):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.num_heads, -1).unbind(2)
        logits = torch.einsum("bqhd,bkhd->bhqk", q, k) / (d // self.num_heads) ** 0.5
        logits = logits + self.edge_bias(edge_type).permute(0, 3, 1, 2)
        q_bias = mask_to_bias(node_mask[:, None, :, None], logits.dtype)
        k_bias = mask_to_bias(node_mask[:, None, None, :], logits.dtype)
        bias = q_bias + k_bias  # expect: MC513 jraphpad
        weights = torch.softmax(logits + bias, dim=-1)
        y = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, n, d)
        return x + self.out(y)


class GraphTransformer(nn.Module):
    def __init__(self, in_dim=5, dim=16, num_heads=2, num_layers=2, num_edge_types=3):
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        self.layers = nn.ModuleList([GraphAttentionLayer(dim, num_heads, num_edge_types) for _ in range(num_layers)])
        self.readout = nn.Linear(dim, 1)

    def forward(self, graph, max_nodes):
        x, node_mask, edge_type = to_dense(graph, get_node_padding_mask(graph), max_nodes)
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x, node_mask, edge_type)
        weights = node_mask[..., None].to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.readout(pooled).squeeze(-1)


def molecule(n, edges, seed):
    g = torch.Generator().manual_seed(seed)
    senders = torch.tensor([s for s, r in edges] + [r for s, r in edges])
    receivers = torch.tensor([r for s, r in edges] + [s for s, r in edges])
    return GraphsTuple(torch.randn(n, 5, generator=g), torch.randint(0, 3, (len(senders),), generator=g),
                       senders, receivers, torch.tensor([n]), torch.tensor([len(senders)]))


def batch(graphs):
    offsets = torch.cumsum(torch.tensor([0] + [g.nodes.shape[0] for g in graphs[:-1]]), 0)
    return GraphsTuple(
        nodes=torch.cat([g.nodes for g in graphs]),
        edges=torch.cat([g.edges for g in graphs]),
        senders=torch.cat([g.senders + o for g, o in zip(graphs, offsets)]),
        receivers=torch.cat([g.receivers + o for g, o in zip(graphs, offsets)]),
        n_node=torch.cat([g.n_node for g in graphs]),
        n_edge=torch.cat([g.n_edge for g in graphs]),
    )


if __name__ == "__main__":
    torch.manual_seed(0)
    model = GraphTransformer()
    a = molecule(4, [(0, 1), (1, 2), (2, 3)], seed=1)
    b = molecule(3, [(0, 1), (1, 2), (0, 2)], seed=2)
    padded = pad_with_graphs(batch([a, b]), n_node=9, n_edge=14)
    pred = model(padded, max_nodes=4)
    graph_mask = get_graph_padding_mask(padded)
    target = torch.tensor([0.5, -1.0, 0.0])
    loss = ((pred - target) ** 2 * graph_mask).sum() / graph_mask.sum()
    loss.backward()
    grads_finite = all(torch.isfinite(p.grad).all() for p in model.parameters())
    print("predictions (last = padding graph):", [round(v, 4) for v in pred.tolist()])
    print("loss:", round(loss.item(), 4), " gradients finite:", grads_finite)
    with torch.no_grad():
        alone = torch.stack([model(pad_with_graphs(g, g.nodes.shape[0] + 1, g.senders.shape[0] + 1), 4)[0]
                             for g in (a, b)])
    print("max |batched - alone| on real graphs:", (pred[:2].detach() - alone).abs().max().item())
