"""Machine-learned interatomic potential for small organic molecules (force matching).

An invariant transformer over atoms with a radial cutoff, in the spirit of
TorchMD-Net's equivariant transformer: Gaussian-smeared distances bias the
attention between neighbours, atomic energies are summed per molecule and
forces are the negative gradient of the energy with respect to positions.
Molecules of different sizes are padded to one batch.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md §3 items 5 and 22)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ELEMENTS = {"H": 1, "C": 6, "N": 7, "O": 8}
SIGMA = {1: 1.1, 6: 1.6, 7: 1.5, 8: 1.45}


def reference_energy(z, pos):
    n = len(z)
    e = pos.new_zeros(())
    for i in range(n):
        for j in range(i + 1, n):
            s = 0.5 * (SIGMA[int(z[i])] + SIGMA[int(z[j])])
            r = (pos[i] - pos[j]).norm()
            e = e + 0.5 * ((1 - torch.exp(-1.2 * (r - s))) ** 2 - 1)
    return e


def sample_molecules(n_mol, seed=0):
    g = torch.Generator().manual_seed(seed)
    zs = torch.tensor(list(ELEMENTS.values()))
    data = []
    for _ in range(n_mol):
        n = int(torch.randint(4, 10, (1,), generator=g))
        z = zs[torch.randint(len(zs), (n,), generator=g)]
        pos = torch.zeros(n, 3)
        i = 1
        while i < n:
            step = F.normalize(torch.randn(3, generator=g), dim=0) * 1.5
            cand = pos[int(torch.randint(i, (1,), generator=g))] + step
            if (pos[:i] - cand).norm(dim=-1).min() > 1.2:
                pos[i] = cand
                i += 1
        pos.requires_grad_(True)
        energy = reference_energy(z, pos)
        forces = -torch.autograd.grad(energy, pos)[0]
        data.append((z, pos.detach(), energy.detach(), forces))
    return data


def collate_molecules(batch):
    n = max(len(z) for z, _, _, _ in batch)
    z = torch.zeros(len(batch), n, dtype=torch.long)
    pos = torch.zeros(len(batch), n, 3)
    forces = torch.zeros(len(batch), n, 3)
    for i, (zi, pi, _, fi) in enumerate(batch):
        z[i, : len(zi)], pos[i, : len(zi)], forces[i, : len(zi)] = zi, pi, fi
    energy = torch.stack([e for _, _, e, _ in batch])
    return z, pos, energy, forces, z > 0


class GaussianSmearing(nn.Module):
    def __init__(self, cutoff, n_rbf):
        super().__init__()
        self.register_buffer("offsets", torch.linspace(0.0, cutoff, n_rbf))
        self.coeff = -0.5 / (cutoff / (n_rbf - 1)) ** 2

    def forward(self, dist):
        return torch.exp(self.coeff * (dist[..., None] - self.offsets) ** 2)


class NeighborAttention(nn.Module):
    def __init__(self, dim, heads, cutoff, n_rbf):
        super().__init__()
        self.heads, self.cutoff = heads, cutoff
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dist_bias = nn.Linear(n_rbf, heads)
        self.out = nn.Linear(dim, dim)

    def forward(self, h, dist, rbf, atom_mask):
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        scores = scores + self.dist_bias(rbf).permute(0, 3, 1, 2)
        neighbors = atom_mask[:, :, None] & atom_mask[:, None, :] & (dist < self.cutoff)
        scores = scores.masked_fill(~neighbors[:, None], float("-inf"))  # expect: MC507 method
        attn = scores.softmax(dim=-1)
        envelope = 0.5 * (torch.cos(dist * math.pi / self.cutoff) + 1.0) * (dist < self.cutoff)
        attn = attn * envelope[:, None]
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class TransformerPotential(nn.Module):
    def __init__(self, dim=64, heads=4, layers=3, cutoff=5.0, n_rbf=32):
        super().__init__()
        self.embed = nn.Embedding(10, dim)
        self.rbf = GaussianSmearing(cutoff, n_rbf)
        self.layers = nn.ModuleList(NeighborAttention(dim, heads, cutoff, n_rbf) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.energy_head = nn.Sequential(nn.Linear(dim, dim // 2), nn.SiLU(), nn.Linear(dim // 2, 1))

    def forward(self, z, pos, atom_mask):
        diff = pos[:, :, None, :] - pos[:, None, :, :]
        dist = (diff.pow(2).sum(-1) + 1e-8).sqrt()
        rbf = self.rbf(dist)
        h = self.embed(z)
        for norm, layer in zip(self.norms, self.layers):
            h = h + layer(norm(h), dist, rbf, atom_mask)
        atomic = self.energy_head(h).squeeze(-1).masked_fill(~atom_mask, 0.0)
        return atomic.sum(-1)


def energy_and_forces(model, z, pos, atom_mask, create_graph):
    pos = pos.clone().requires_grad_(True)
    energy = model(z, pos, atom_mask)
    forces = -torch.autograd.grad(energy.sum(), pos, create_graph=create_graph)[0]
    return energy, forces


def main():
    torch.manual_seed(0)
    train = sample_molecules(192, seed=1)
    test = collate_molecules(sample_molecules(48, seed=2))
    model = TransformerPotential()
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    for epoch in range(4):
        model.train()
        for i in range(0, len(train), 16):
            z, pos, energy, forces, atom_mask = collate_molecules(train[i : i + 16])
            pred_e, pred_f = energy_and_forces(model, z, pos, atom_mask, create_graph=True)
            loss = F.mse_loss(pred_e, energy) + 10.0 * F.mse_loss(pred_f[atom_mask], forces[atom_mask])
            opt.zero_grad()
            loss.backward()
            opt.step()
        z, pos, energy, forces, atom_mask = test
        pred_e, pred_f = energy_and_forces(model, z, pos, atom_mask, create_graph=False)
        e_mae = (pred_e - energy).abs().mean().item()
        f_mae = (pred_f[atom_mask] - forces[atom_mask]).abs().mean().item()
        print(f"epoch {epoch} loss {loss.item():.3f} energy MAE {e_mae:.3f} force MAE {f_mae:.3f}")


if __name__ == "__main__":
    main()
