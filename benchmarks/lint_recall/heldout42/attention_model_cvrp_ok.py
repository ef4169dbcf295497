"""Capacitated vehicle routing with the Attention Model (Kool, van Hoof and Welling, 2019).

wouterkool/attention-learn-to-route's layout: GraphAttentionEncoder of MultiHeadAttentionLayers
(skip connections, batch normalization, feed-forward), the depot and customer init embeddings,
a decoder with a fixed context, a glimpse over the node keys and tanh-clipped logits masked by
StateCVRP's feasibility mask, REINFORCE with an exponential baseline. Instances of 10-20
customers are padded to one node count per batch; padded nodes never take part.

Source: conventions.md section 2.6, section 1 (SDPA row) and section 5 item 6
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CAPACITY = 30.0


class MultiHeadAttention(nn.Module):
    def __init__(self, n_heads, input_dim, embed_dim):
        super().__init__()
        self.n_heads = n_heads
        self.W_query = nn.Linear(input_dim, embed_dim, bias=False)
        self.W_key = nn.Linear(input_dim, embed_dim, bias=False)
        self.W_val = nn.Linear(input_dim, embed_dim, bias=False)
        self.W_out = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, h, mask):
        batch_size, graph_size, input_dim = h.size()
        shp = (batch_size, graph_size, self.n_heads, -1)
        Q = self.W_query(h).view(shp).transpose(1, 2)
        K = self.W_key(h).view(shp).transpose(1, 2)
        V = self.W_val(h).view(shp).transpose(1, 2)
        heads = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask[:, None, None, :])
        return self.W_out(heads.transpose(1, 2).reshape(batch_size, graph_size, -1))


class Normalization(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.normalizer = nn.BatchNorm1d(embed_dim, affine=True)

    def forward(self, x):
        return self.normalizer(x.view(-1, x.size(-1))).view(*x.size())


class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, n_heads, embed_dim, feed_forward_hidden=256):
        super().__init__()
        self.mha = MultiHeadAttention(n_heads, embed_dim, embed_dim)
        self.norm1 = Normalization(embed_dim)
        self.ff = nn.Sequential(nn.Linear(embed_dim, feed_forward_hidden), nn.ReLU(), nn.Linear(feed_forward_hidden, embed_dim))
        self.norm2 = Normalization(embed_dim)

    def forward(self, h, mask):
        h = self.norm1(h + self.mha(h, mask))
        return self.norm2(h + self.ff(h))


class GraphAttentionEncoder(nn.Module):
    def __init__(self, n_heads, embed_dim, n_layers):
        super().__init__()
        self.layers = nn.ModuleList(MultiHeadAttentionLayer(n_heads, embed_dim) for _ in range(n_layers))

    def forward(self, x, node_keep):
        for layer in self.layers:
            x = layer(x, node_keep)
        keep = node_keep.unsqueeze(-1).float()
        return x, (x * keep).sum(1) / keep.sum(1)


class AttentionModel(nn.Module):
    def __init__(self, embedding_dim=64, n_encode_layers=2, n_heads=4, tanh_clipping=10.0):
        super().__init__()
        self.embedding_dim, self.n_heads, self.tanh_clipping = embedding_dim, n_heads, tanh_clipping
        self.init_embed_depot = nn.Linear(2, embedding_dim)
        self.init_embed = nn.Linear(3, embedding_dim)
        self.embedder = GraphAttentionEncoder(n_heads, embedding_dim, n_encode_layers)
        self.project_node_embeddings = nn.Linear(embedding_dim, 3 * embedding_dim, bias=False)
        self.project_fixed_context = nn.Linear(embedding_dim, embedding_dim, bias=False)
        self.project_step_context = nn.Linear(embedding_dim + 1, embedding_dim, bias=False)
        self.project_out = nn.Linear(embedding_dim, embedding_dim, bias=False)

    def _init_embed(self, input):
        nodes = torch.cat([input["loc"], input["demand"][..., None] / CAPACITY], dim=-1)
        return torch.cat([self.init_embed_depot(input["depot"])[:, None], self.init_embed(nodes)], dim=1)

    def _make_heads(self, v):
        return v.view(v.size(0), v.size(1), self.n_heads, -1).permute(0, 2, 1, 3)

    def forward(self, input, n_customers, decode_type="sampling"):
        batch_size, graph_size = input["loc"].size(0), input["loc"].size(1) + 1
        node_keep = torch.arange(graph_size, device=n_customers.device)[None, :] <= n_customers[:, None]
        embeddings, graph_embed = self.embedder(self._init_embed(input), node_keep)
        fixed_context = self.project_fixed_context(graph_embed)[:, None, :]
        glimpse_K, glimpse_V, logit_K = self.project_node_embeddings(embeddings).chunk(3, dim=-1)
        glimpse_K, glimpse_V = self._make_heads(glimpse_K), self._make_heads(glimpse_V)
        demand = torch.cat([torch.zeros_like(input["demand"][:, :1]), input["demand"]], dim=1)
        coords = torch.cat([input["depot"][:, None], input["loc"]], dim=1)
        visited = ~node_keep
        visited[:, 0] = False
        used_capacity = torch.zeros(batch_size, 1)
        prev_a = torch.zeros(batch_size, dtype=torch.long)
        log_ps, tour_length = [], torch.zeros(batch_size)
        for step in range(2 * graph_size):
            all_done = visited[:, 1:].all(-1)
            if all_done.all():
                break
            mask = visited | (demand + used_capacity > CAPACITY)
            mask[:, 0] = (prev_a == 0) & ~all_done
            mask = mask[:, None, :]
            step_context = torch.cat([embeddings[torch.arange(batch_size), prev_a], CAPACITY - used_capacity], dim=-1)
            query = fixed_context + self.project_step_context(step_context)[:, None, :]
            glimpse_Q = self._make_heads(query)
            compatibility = glimpse_Q @ glimpse_K.transpose(-2, -1) / math.sqrt(glimpse_Q.size(-1))
            compatibility = compatibility.masked_fill(mask[:, None], float("-inf"))
            heads = torch.softmax(compatibility, dim=-1) @ glimpse_V
            glimpse = self.project_out(heads.permute(0, 2, 1, 3).reshape(batch_size, 1, self.embedding_dim))
            logits = (glimpse @ logit_K.transpose(-2, -1)).squeeze(1) / math.sqrt(self.embedding_dim)
            logits = torch.tanh(logits) * self.tanh_clipping
            log_p = torch.log_softmax(logits.masked_fill(mask.squeeze(1), float("-inf")), dim=-1)
            selected = log_p.exp().multinomial(1).squeeze(1) if decode_type == "sampling" else log_p.argmax(-1)
            selected = torch.where(all_done, torch.zeros_like(selected), selected)
            log_ps.append(torch.where(all_done, torch.zeros(batch_size), log_p.gather(1, selected[:, None]).squeeze(1)))
            tour_length += (coords[torch.arange(batch_size), selected] - coords[torch.arange(batch_size), prev_a]).norm(dim=-1)
            used_capacity = torch.where(selected[:, None] == 0, torch.zeros_like(used_capacity), used_capacity + demand.gather(1, selected[:, None]))
            visited = visited.scatter(1, selected[:, None], True)
            visited[:, 0] = False
            prev_a = selected
        tour_length += (coords[:, 0] - coords[torch.arange(batch_size), prev_a]).norm(dim=-1)
        return tour_length, torch.stack(log_ps, 1).sum(1)


def generate_instances(batch_size, min_size=10, max_size=20, generator=None):
    n_customers = torch.randint(min_size, max_size + 1, (batch_size,), generator=generator)
    width = int(n_customers.max())
    present = torch.arange(width)[None, :] < n_customers[:, None]
    loc = torch.rand(batch_size, width, 2, generator=generator) * present[..., None]
    demand = torch.randint(1, 10, (batch_size, width), generator=generator).float() * present
    return {"loc": loc, "demand": demand, "depot": torch.rand(batch_size, 2, generator=generator)}, n_customers


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = AttentionModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    baseline, beta = None, 0.8
    for epoch_step in range(100):
        model.train()
        input, n_customers = generate_instances(64, generator=g)
        cost, log_likelihood = model(input, n_customers)
        baseline = cost.mean().detach() if baseline is None else beta * baseline + (1 - beta) * cost.mean().detach()
        loss = ((cost - baseline) * log_likelihood).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if epoch_step % 25 == 0:
            print(f"step {epoch_step}: average tour length {cost.mean().item():.3f}")
    model.eval()
    with torch.no_grad():
        input, n_customers = generate_instances(256, generator=torch.Generator().manual_seed(1))
        greedy, _ = model(input, n_customers, decode_type="greedy")
        sampled, _ = model(input, n_customers, decode_type="sampling")
    print(f"greedy {greedy.mean():.3f} vs sampled {sampled.mean():.3f} on 256 instances")


if __name__ == "__main__":
    main()
