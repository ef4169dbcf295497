"""Power-grid fault localisation from PMU snapshots with the Edge-augmented Graph Transformer.

Imitates shamim-hussain/egt_pytorch (Hussain et al., KDD 2022): a `Graph` dict wrapper, the
`input_block` building node and edge channels (`nodef_embed`, `dist_embed` over clipped hop
distances, `featm` edge features), `EGT_Layer` with the static `_egt` kernel (`lin_QKV`,
`lin_E`, `lin_G`, logits clipped to `clip_logits_value`, sigmoid gates, softmax over the key
axis of (b, l, m, h) logits, the edge channels updated from `H_hat` through `lin_O_e`), the
node and edge FFNs with `mha_ln_*` / `ffn_ln_*`, and a node-level `output_block`.
Synthetic data: radial distribution feeders of 8-14 buses with a few tie lines, batched
densely; a three-phase fault at one bus sags the voltages by electrical distance, and the
model names the faulted bus from the PMU magnitudes and angles.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md §3 items 5 and 22),
conventions.md §2.3.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Graph(dict):
    def __dir__(self):
        return super().__dir__() + list(self.keys())

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key)

    def __setattr__(self, key, value):
        self[key] = value

    def copy(self):
        return self.__class__(self)


class EGT_Layer(nn.Module):
    @staticmethod
    def _egt(scale_dot, num_heads, dot_dim, clip_logits_min, clip_logits_max, attn_dropout,
             training, QKV, G, E, mask):
        shp = QKV.shape
        Q, K, V = QKV.view(shp[0], shp[1], -1, num_heads).split(dot_dim, dim=2)
        A_hat = torch.einsum("bldh,bmdh->blmh", Q, K)
        if scale_dot:
            A_hat = A_hat * (dot_dim ** -0.5)
        H_hat = A_hat.clamp(clip_logits_min, clip_logits_max) + E
        gates = torch.sigmoid(G.masked_fill(~mask[..., None], torch.finfo(G.dtype).min))
        H_masked = H_hat.masked_fill(~mask[..., None], torch.finfo(H_hat.dtype).min)
        A_tild = F.softmax(H_masked, dim=2) * gates
        if attn_dropout > 0:
            A_tild = F.dropout(A_tild, p=attn_dropout, training=training)
        V_att = torch.einsum("blmh,bmkh->blkh", A_tild, V)
        V_att = V_att.reshape(shp[0], shp[1], num_heads * dot_dim)
        return V_att, H_hat

    def __init__(self, node_width, edge_width, num_heads, attn_dropout=0.0, activation="elu",
                 clip_logits_value=(-5, 5), node_ffn_multiplier=2.0, edge_ffn_multiplier=2.0,
                 scale_dot=True):
        super().__init__()
        self.node_width = node_width
        self.edge_width = edge_width
        self.num_heads = num_heads
        self.attn_dropout = attn_dropout
        self.clip_logits_value = clip_logits_value
        self.scale_dot = scale_dot
        self.dot_dim = self.node_width // self.num_heads
        self.mha_ln_h = nn.LayerNorm(self.node_width)
        self.mha_ln_e = nn.LayerNorm(self.edge_width)
        self.lin_E = nn.Linear(self.edge_width, self.num_heads)
        self.lin_QKV = nn.Linear(self.node_width, self.node_width * 3)
        self.lin_G = nn.Linear(self.edge_width, self.num_heads)
        self.ffn_fn = getattr(F, activation)
        self.lin_O_h = nn.Linear(self.node_width, self.node_width)
        node_inner_dim = round(self.node_width * node_ffn_multiplier)
        self.ffn_ln_h = nn.LayerNorm(self.node_width)
        self.lin_W_h_1 = nn.Linear(self.node_width, node_inner_dim)
        self.lin_W_h_2 = nn.Linear(node_inner_dim, self.node_width)
        self.lin_O_e = nn.Linear(self.num_heads, self.edge_width)
        edge_inner_dim = round(self.edge_width * edge_ffn_multiplier)
        self.ffn_ln_e = nn.LayerNorm(self.edge_width)
        self.lin_W_e_1 = nn.Linear(self.edge_width, edge_inner_dim)
        self.lin_W_e_2 = nn.Linear(edge_inner_dim, self.edge_width)

    def forward(self, g):
        h, e = g.h, g.e
        mask = g.mask
        h_r1, e_r1 = h, e
        h_ln = self.mha_ln_h(h)
        e_ln = self.mha_ln_e(e)
        QKV = self.lin_QKV(h_ln)
        E = self.lin_E(e_ln)
        G = self.lin_G(e_ln)
        V_att, H_hat = self._egt(self.scale_dot, self.num_heads, self.dot_dim,
                                 self.clip_logits_value[0], self.clip_logits_value[-1],
                                 self.attn_dropout, self.training, QKV, G, E, mask)
        h = self.lin_O_h(V_att) + h_r1
        h_r2 = h
        h = self.lin_W_h_2(self.ffn_fn(self.lin_W_h_1(self.ffn_ln_h(h)))) + h_r2
        e = self.lin_O_e(H_hat) + e_r1
        e_r2 = e
        e = self.lin_W_e_2(self.ffn_fn(self.lin_W_e_1(self.ffn_ln_e(e)))) + e_r2
        g = g.copy()
        g.h, g.e = h, e
        return g


class EGT_GridFault(nn.Module):
    def __init__(self, node_feat_dim, edge_feat_dim, node_width=32, edge_width=16, num_heads=4,
                 model_height=3, max_dist=8):
        super().__init__()
        self.max_dist = max_dist
        self.nodef_embed = nn.Linear(node_feat_dim, node_width)
        self.dist_embed = nn.Embedding(max_dist + 2, edge_width)
        self.featm_embed = nn.Linear(edge_feat_dim, edge_width)
        self.EGT_layers = nn.ModuleList(
            [EGT_Layer(node_width, edge_width, num_heads) for _ in range(model_height)])
        self.final_ln_h = nn.LayerNorm(node_width)
        self.mlp_layers = nn.Sequential(nn.Linear(node_width, node_width), nn.ELU(),
                                        nn.Linear(node_width, 1))

    def input_block(self, inputs):
        g = Graph(inputs)
        node_mask = g.node_mask
        g.mask = node_mask[:, :, None] & node_mask[:, None, :]
        g.h = self.nodef_embed(g.node_features)
        dist = g.distance_matrix.clamp(0, self.max_dist) + 1
        g.e = self.dist_embed(dist) + self.featm_embed(g.feature_matrix)
        return g

    def output_block(self, g):
        h = self.final_ln_h(g.h)
        logits = self.mlp_layers(h).squeeze(-1)
        return logits.masked_fill(~g.node_mask, torch.finfo(logits.dtype).min)

    def forward(self, inputs):
        g = self.input_block(inputs)
        for layer in self.EGT_layers:
            g = layer(g)
        return self.output_block(g)


def make_feeder(rng):
    n = int(rng.integers(8, 15))
    adj = np.zeros((n, n), dtype=bool)
    z = np.zeros((n, n, 2), dtype=np.float32)
    for i in range(1, n):
        j = int(rng.integers(max(0, i - 3), i))
        adj[i, j] = adj[j, i] = True
        z[i, j] = z[j, i] = rng.uniform(0.05, 0.4, size=2)
    for _ in range(2):
        i, j = rng.choice(n, size=2, replace=False)
        if not adj[i, j]:
            adj[i, j] = adj[j, i] = True
            z[i, j] = z[j, i] = rng.uniform(0.2, 0.6, size=2)
    hops = np.where(adj, 1, 99)
    np.fill_diagonal(hops, 0)
    elec = np.where(adj, np.hypot(z[..., 0], z[..., 1]), 99.0)
    np.fill_diagonal(elec, 0.0)
    for k in range(n):
        hops = np.minimum(hops, hops[:, k:k + 1] + hops[k:k + 1, :])
        elec = np.minimum(elec, elec[:, k:k + 1] + elec[k:k + 1, :])
    return n, adj, z, hops, elec


def make_snapshot(rng):
    n, adj, z, hops, elec = make_feeder(rng)
    fault = int(rng.integers(1, n))
    load = rng.uniform(0.2, 1.0, size=n)
    sag = 1.0 - np.exp(-3.0 * elec[fault]) * rng.uniform(0.6, 0.9)
    vm = sag + 0.02 * rng.normal(size=n)
    va = -0.3 * (1 - sag) * np.sign(np.arange(n) - fault + 0.5) + 0.02 * rng.normal(size=n)
    node_features = np.stack([vm, va, load, (np.arange(n) == 0).astype(float)], 1)
    feature_matrix = np.concatenate([z, adj[..., None].astype(np.float32)], -1)
    return dict(n=n, node_features=node_features, feature_matrix=feature_matrix,
                distance_matrix=hops, fault=fault)


def collate_graphs(samples):
    N = max(s["n"] for s in samples)
    B = len(samples)
    out = dict(node_features=torch.zeros(B, N, 4), feature_matrix=torch.zeros(B, N, N, 3),
               distance_matrix=torch.zeros(B, N, N, dtype=torch.long),
               node_mask=torch.zeros(B, N, dtype=torch.bool),
               target=torch.tensor([s["fault"] for s in samples]))
    for i, s in enumerate(samples):
        n = s["n"]
        out["node_features"][i, :n] = torch.tensor(s["node_features"], dtype=torch.float32)
        out["feature_matrix"][i, :n, :n] = torch.from_numpy(s["feature_matrix"])
        out["distance_matrix"][i, :n, :n] = torch.from_numpy(s["distance_matrix"])
        out["node_mask"][i, :n] = True
    return out


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    train_set = [make_snapshot(rng) for _ in range(320)]
    test_set = [make_snapshot(rng) for _ in range(96)]
    model = EGT_GridFault(node_feat_dim=4, edge_feat_dim=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(6):
        model.train()
        order = rng.permutation(len(train_set))
        losses = []
        for start in range(0, len(order), 32):
            batch = collate_graphs([train_set[i] for i in order[start:start + 32]])
            logits = model(batch)
            loss = F.cross_entropy(logits, batch["target"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {np.mean(losses):.4f}")
    model.eval()
    with torch.no_grad():
        batch = collate_graphs(test_set)
        pred = model(batch).argmax(dim=-1)
    print(f"fault bus accuracy {(pred == batch['target']).float().mean().item():.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
