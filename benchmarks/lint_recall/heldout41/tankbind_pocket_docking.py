"""Protein-ligand docking and affinity with TankBind's trigonometry-aware pair model.

Layout of luwei0917/TankBind (Lu et al., NeurIPS 2022, tankbind/model.py): residue and atom
embeddings batched with to_dense_batch, the pair tensor z = einsum(protein, compound) with
z_mask, TriangleProteinToCompound_v2 mixing in the protein and compound distance one-hots,
TriangleSelfAttentionRowWise, Transition, the inter-molecular distance map head (sigmoid * 10)
and the gated pair-energy affinity readout (readout_mode 2), trained on synthetic pockets.

Source: seed masked_fill_inplace.txt (注意, 梯度计算风险)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def to_dense_batch(x, batch, fill_value=0.0):
    batch_size = int(batch.max()) + 1
    num_nodes = torch.bincount(batch, minlength=batch_size)
    max_num_nodes = int(num_nodes.max())
    cum_nodes = torch.cat([batch.new_zeros(1), num_nodes.cumsum(dim=0)])
    idx = torch.arange(batch.size(0), device=x.device) - cum_nodes[batch] + batch * max_num_nodes
    out = x.new_full([batch_size * max_num_nodes] + list(x.size())[1:], fill_value)
    out[idx] = x
    mask = torch.zeros(batch_size * max_num_nodes, dtype=torch.bool, device=x.device)
    mask[idx] = True
    return out.view([batch_size, max_num_nodes] + list(x.size())[1:]), mask.view(batch_size, max_num_nodes)


def get_pair_dis_one_hot(d, bin_size=2, bin_min=-1, bin_max=30):
    pair_dis = torch.cdist(d, d, compute_mode="donot_use_mm_for_euclid_dist")
    pair_dis[pair_dis > bin_max] = bin_max
    pair_dis_bin_index = torch.div(pair_dis - bin_min, bin_size, rounding_mode="floor").long()
    return F.one_hot(pair_dis_bin_index, num_classes=16).float()


class TriangleProteinToCompound_v2(nn.Module):
    def __init__(self, embedding_channels=64, c=32):
        super().__init__()
        self.layernorm = nn.LayerNorm(embedding_channels)
        self.layernorm_c = nn.LayerNorm(c)
        self.gate_linear1 = nn.Linear(embedding_channels, c)
        self.gate_linear2 = nn.Linear(embedding_channels, c)
        self.linear1 = nn.Linear(embedding_channels, c)
        self.linear2 = nn.Linear(embedding_channels, c)
        self.ending_gate_linear = nn.Linear(embedding_channels, embedding_channels)
        self.linear_after_sum = nn.Linear(c, embedding_channels)

    def forward(self, z, protein_pair, compound_pair, z_mask):
        z = self.layernorm(z)
        protein_pair = self.layernorm_c(protein_pair)
        compound_pair = self.layernorm_c(compound_pair)
        ab1 = self.gate_linear1(z).sigmoid() * self.linear1(z) * z_mask
        ab2 = self.gate_linear2(z).sigmoid() * self.linear2(z) * z_mask
        g = self.ending_gate_linear(z).sigmoid()
        block1 = torch.einsum("bikc,bkjc->bijc", protein_pair, ab1)
        block2 = torch.einsum("bikc,bjkc->bijc", ab2, compound_pair)
        return g * self.linear_after_sum(self.layernorm_c(block1 + block2)) * z_mask


class TriangleSelfAttentionRowWise(nn.Module):
    def __init__(self, embedding_channels=64, c=16, num_attention_heads=4):
        super().__init__()
        self.c = c
        self.num_attention_heads = num_attention_heads
        self.all_head_size = c * num_attention_heads
        self.layernorm = nn.LayerNorm(embedding_channels)
        self.linear_q = nn.Linear(embedding_channels, self.all_head_size, bias=False)
        self.linear_k = nn.Linear(embedding_channels, self.all_head_size, bias=False)
        self.linear_v = nn.Linear(embedding_channels, self.all_head_size, bias=False)
        self.g = nn.Linear(embedding_channels, self.all_head_size)
        self.final_linear = nn.Linear(self.all_head_size, embedding_channels)

    def forward(self, z, z_mask):
        z = self.layernorm(z)
        batch_n, p_length, c_length, _ = z.shape
        z_mask_i = z_mask.view((batch_n, p_length, 1, 1, -1))
        attention_mask_i = (1.0 - z_mask_i.float()) * torch.finfo(z.dtype).min
        q = self.linear_q(z).view(batch_n, p_length, c_length, self.num_attention_heads, self.c) / self.c ** 0.5
        k = self.linear_k(z).view(batch_n, p_length, c_length, self.num_attention_heads, self.c)
        v = self.linear_v(z).view(batch_n, p_length, c_length, self.num_attention_heads, self.c)
        attention = torch.einsum("biqhc,bikhc->bihqk", q, k) + attention_mask_i
        attention_weights = F.softmax(attention, dim=-1)
        attention_coefficient = torch.einsum("bihqk,bikhc->biqhc", attention_weights, v)
        attention_coefficient = attention_coefficient.reshape(batch_n, p_length, c_length, self.all_head_size)
        return self.final_linear(self.g(z).sigmoid() * attention_coefficient)


class Transition(nn.Module):
    def __init__(self, embedding_channels=64, n=4):
        super().__init__()
        self.layernorm = nn.LayerNorm(embedding_channels)
        self.linear1 = nn.Linear(embedding_channels, n * embedding_channels)
        self.linear2 = nn.Linear(n * embedding_channels, embedding_channels)

    def forward(self, z):
        z = self.layernorm(z)
        return self.linear2(F.relu(self.linear1(z)))


class IaBNet_with_affinity(nn.Module):
    def __init__(self, node_dim=20, atom_dim=12, embedding_channels=64, n_trigonometry_module_stack=3,
                 protein_bin_max=30):
        super().__init__()
        self.protein_bin_max = protein_bin_max
        self.protein_linear = nn.Sequential(nn.Linear(node_dim, embedding_channels), nn.ReLU(),
                                            nn.Linear(embedding_channels, embedding_channels))
        self.compound_linear = nn.Sequential(nn.Linear(atom_dim, embedding_channels), nn.ReLU(),
                                             nn.Linear(embedding_channels, embedding_channels))
        self.layernorm = nn.LayerNorm(embedding_channels)
        self.n_trigonometry_module_stack = n_trigonometry_module_stack
        self.protein_pair_embedding = nn.Linear(16, 32)
        self.compound_pair_embedding = nn.Linear(16, 32)
        self.protein_to_compound_list = nn.ModuleList(
            [TriangleProteinToCompound_v2(embedding_channels, c=32) for _ in range(n_trigonometry_module_stack)])
        self.triangle_self_attention_list = nn.ModuleList(
            [TriangleSelfAttentionRowWise(embedding_channels) for _ in range(n_trigonometry_module_stack)])
        self.tranistion = Transition(embedding_channels=embedding_channels, n=4)
        self.linear = nn.Linear(embedding_channels, 1)
        self.linear_energy = nn.Linear(embedding_channels, 1)
        self.gate_linear = nn.Linear(embedding_channels, 1)
        self.leaky = nn.LeakyReLU()
        self.bias = nn.Parameter(torch.ones(1))
        self.dropout = nn.Dropout2d(p=0.1)

    def forward(self, data):
        protein_out = self.protein_linear(data["node_feat"])
        compound_out = self.compound_linear(data["atom_feat"])
        protein_out_batched, protein_out_mask = to_dense_batch(protein_out, data["protein_batch"])
        compound_out_batched, compound_out_mask = to_dense_batch(compound_out, data["compound_batch"])
        p_coords_batched, _ = to_dense_batch(data["node_xyz"], data["protein_batch"], fill_value=1e3)
        c_coords_batched, _ = to_dense_batch(data["coords_conformer"], data["compound_batch"], fill_value=1e3)
        protein_pair = self.protein_pair_embedding(get_pair_dis_one_hot(p_coords_batched, bin_max=self.protein_bin_max))
        compound_pair = self.compound_pair_embedding(get_pair_dis_one_hot(c_coords_batched, bin_size=1, bin_max=14))
        protein_out_batched = self.layernorm(protein_out_batched)
        compound_out_batched = self.layernorm(compound_out_batched)
        z = torch.einsum("bik,bjk->bijk", protein_out_batched, compound_out_batched)
        z_mask = protein_out_mask[:, :, None] & compound_out_mask[:, None, :]
        for i_module in range(self.n_trigonometry_module_stack):
            z = z + self.dropout(
                self.protein_to_compound_list[i_module](z, protein_pair, compound_pair, z_mask.unsqueeze(-1)))
            z = z + self.dropout(self.triangle_self_attention_list[i_module](z, z_mask))
            z = self.tranistion(z)
        y_pred = self.linear(z).squeeze(-1)[z_mask].sigmoid() * 10
        gate = self.gate_linear(z).sigmoid()
        gate.masked_fill_(~z_mask.unsqueeze(-1), 0.0)  # expect: MC505 tankbind
        pair_energy = (gate * self.linear_energy(z)).squeeze(-1)
        affinity_pred = self.leaky(self.bias + pair_energy.sum(axis=(-1, -2)))
        return y_pred, affinity_pred


def synthetic_complexes(n, gen):
    graphs = []
    for _ in range(n):
        n_res, n_atoms = int(torch.randint(16, 33, (1,), generator=gen)), int(torch.randint(6, 15, (1,), generator=gen))
        node_xyz = 12.0 * torch.rand(n_res, 3, generator=gen)
        ligand = node_xyz[:n_atoms // 2].mean(0) + 2.0 * torch.randn(n_atoms, 3, generator=gen)
        node_feat = torch.randn(n_res, 20, generator=gen)
        atom_feat = F.one_hot(torch.randint(0, 12, (n_atoms,), generator=gen), 12).float()
        dis_map = torch.cdist(node_xyz, ligand).clamp(max=10.0)
        affinity = (dis_map < 4.0).float().sum() / 4.0 + atom_feat[:, :3].sum()
        conformer = ligand - ligand.mean(0)
        graphs.append((node_feat, node_xyz, atom_feat, conformer, dis_map.flatten(), affinity))
    return graphs


def collate(graphs):
    data = {"node_feat": torch.cat([g[0] for g in graphs]), "node_xyz": torch.cat([g[1] for g in graphs]),
            "atom_feat": torch.cat([g[2] for g in graphs]), "coords_conformer": torch.cat([g[3] for g in graphs])}
    data["protein_batch"] = torch.cat([torch.full((g[0].size(0),), i) for i, g in enumerate(graphs)])
    data["compound_batch"] = torch.cat([torch.full((g[2].size(0),), i) for i, g in enumerate(graphs)])
    return data, torch.cat([g[4] for g in graphs]), torch.tensor([float(g[5]) for g in graphs])


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train, test = synthetic_complexes(512, gen), synthetic_complexes(64, gen)
    model = IaBNet_with_affinity()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        for b in range(0, 512, 16):
            data, dis_map, affinity = collate(train[b:b + 16])
            y_pred, affinity_pred = model(data)
            contact_loss = F.mse_loss(y_pred, dis_map)
            affinity_loss = F.mse_loss(affinity_pred, affinity)
            loss = contact_loss + 0.1 * affinity_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            data, dis_map, affinity = collate(test)
            y_pred, affinity_pred = model(data)
            rmse = torch.sqrt(F.mse_loss(affinity_pred, affinity)).item()
            pearson = torch.corrcoef(torch.stack([affinity_pred, affinity]))[0, 1].item()
        mae = (y_pred - dis_map).abs().mean().item()
        print(f"epoch {epoch} contact {contact_loss.item():.3f} test distance MAE {mae:.3f} "
              f"affinity RMSE {rmse:.3f} Pearson {pearson:.3f}")
