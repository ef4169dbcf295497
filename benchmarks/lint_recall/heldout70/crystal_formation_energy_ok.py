"""CGCNN-style formation-energy regressor over periodic crystal neighbour lists.

Each atom keeps its M nearest neighbours within a radius (CGCNN's
``get_all_neighbors`` layout, padded to M with index 0 and a distance past the
cutoff), a Gaussian distance expansion, gated convolutions and an attention
readout over the atoms of each crystal.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险); conventions.md section 2.3.
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

RADIUS = 6.0
MAX_NBR = 8


class GaussianDistance:
    def __init__(self, dmin=0.0, dmax=RADIUS, step=0.4, var=None):
        self.filter = torch.arange(dmin, dmax + step, step)
        self.var = var if var is not None else step

    def expand(self, distances):
        return torch.exp(-((distances[..., None] - self.filter) ** 2) / self.var ** 2)


def neighbour_list(frac_coords, lattice, radius=RADIUS, max_nbr=MAX_NBR):
    cart = frac_coords @ lattice
    shifts = torch.tensor([[i, j, k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)], dtype=cart.dtype)
    images = cart[None, :, :] + (shifts @ lattice)[:, None, :]
    d = torch.cdist(cart, images.reshape(-1, 3)).view(cart.size(0), shifts.size(0), cart.size(0))
    d = d.min(dim=1).values
    d.fill_diagonal_(float("inf"))
    dist, idx = d.topk(min(max_nbr, d.size(1)), dim=1, largest=False)
    if dist.size(1) < max_nbr:
        extra = max_nbr - dist.size(1)
        dist = F.pad(dist, (0, extra), value=radius + 1.0)
        idx = F.pad(idx, (0, extra), value=0)
    within = dist <= radius
    dist = torch.where(within, dist, torch.full_like(dist, radius + 1.0))
    return idx, dist, within


class ConvLayer(nn.Module):
    def __init__(self, atom_fea_len, nbr_fea_len):
        super().__init__()
        self.fc_full = nn.Linear(2 * atom_fea_len + nbr_fea_len, 2 * atom_fea_len)
        self.bn1 = nn.BatchNorm1d(2 * atom_fea_len)
        self.bn2 = nn.BatchNorm1d(atom_fea_len)

    def forward(self, atom_in_fea, nbr_fea, nbr_fea_idx, nbr_keep):
        n, m = nbr_fea_idx.shape
        atom_nbr_fea = atom_in_fea[nbr_fea_idx, :]
        total = torch.cat([atom_in_fea.unsqueeze(1).expand(n, m, -1), atom_nbr_fea, nbr_fea], dim=2)
        total = self.bn1(self.fc_full(total).view(n * m, -1)).view(n, m, -1)
        nbr_filter, nbr_core = total.chunk(2, dim=2)
        nbr_filter = torch.sigmoid(nbr_filter)
        nbr_filter = nbr_filter.masked_fill(~nbr_keep[..., None], 0.0)
        nbr_core = F.softplus(nbr_core)
        summed = self.bn2((nbr_filter * nbr_core).sum(dim=1))
        return F.softplus(atom_in_fea + summed)


class AttentionReadout(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, h, crystal_index, num_crystals):
        s = self.score(h).squeeze(-1)
        s_max = torch.full((num_crystals,), -math.inf).scatter_reduce(0, crystal_index, s, reduce="amax")
        w = torch.exp(s - s_max[crystal_index])
        z = torch.zeros(num_crystals).index_add(0, crystal_index, w)
        w = w / z[crystal_index]
        return torch.zeros(num_crystals, h.size(-1)).index_add(0, crystal_index, w[:, None] * h)


class CrystalGraphConvNet(nn.Module):
    def __init__(self, num_species=90, atom_fea_len=32, n_conv=3):
        super().__init__()
        self.gdf = GaussianDistance()
        nbr_fea_len = self.gdf.filter.numel()
        self.embedding = nn.Embedding(num_species, atom_fea_len)
        self.convs = nn.ModuleList([ConvLayer(atom_fea_len, nbr_fea_len) for _ in range(n_conv)])
        self.readout = AttentionReadout(atom_fea_len)
        self.fc_out = nn.Sequential(nn.Linear(atom_fea_len, 64), nn.Softplus(), nn.Linear(64, 1))

    def forward(self, crystal):
        nbr_fea = self.gdf.expand(crystal["nbr_dist"])
        h = self.embedding(crystal["species"])
        for conv in self.convs:
            h = conv(h, nbr_fea, crystal["nbr_idx"], crystal["nbr_keep"])
        pooled = self.readout(h, crystal["crystal_index"], crystal["num_crystals"])
        return self.fc_out(pooled).squeeze(-1)


def collate_crystals(structures):
    species, nbr_idx, nbr_dist, nbr_keep, crystal_index, offset = [], [], [], [], [], 0
    for c, s in enumerate(structures):
        idx, dist, within = neighbour_list(s["frac_coords"], s["lattice"])
        species.append(s["species"])
        nbr_idx.append(idx + offset)
        nbr_dist.append(dist)
        nbr_keep.append(within)
        crystal_index.append(torch.full((s["species"].numel(),), c))
        offset += s["species"].numel()
    return {
        "species": torch.cat(species),
        "nbr_idx": torch.cat(nbr_idx),
        "nbr_dist": torch.cat(nbr_dist),
        "nbr_keep": torch.cat(nbr_keep),
        "crystal_index": torch.cat(crystal_index),
        "num_crystals": len(structures),
    }


def random_structure(n_atoms, a):
    return {
        "species": torch.randint(1, 90, (n_atoms,)),
        "frac_coords": torch.rand(n_atoms, 3),
        "lattice": torch.eye(3) * a + 0.1 * torch.randn(3, 3),
    }


def train_step(model, opt, batch, target):
    loss = F.mse_loss(model(batch), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    structures = [random_structure(n, a) for n, a in ((4, 4.0), (6, 5.5), (3, 9.0), (5, 4.8))]
    batch = collate_crystals(structures)
    target = torch.tensor([-1.2, -0.4, 0.3, -2.1])
    model = CrystalGraphConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if "--train" in sys.argv:
        for step in range(3):
            print("train mse", round(train_step(model, opt, batch, target), 4))
    model.eval()
    with torch.no_grad():
        print("formation energy per atom", [round(v, 3) for v in model(batch).tolist()])
