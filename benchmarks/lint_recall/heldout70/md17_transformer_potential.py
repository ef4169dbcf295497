"""Transformer interatomic potential for MD17-style trajectories (TorchMD-Net layout).

Atom embeddings with a neighbour embedding, exponential-normal radial basis
functions with a cosine cutoff, distance-filtered softmax attention within the
cutoff radius, per-atom energies summed to the molecule and forces as the
negative gradient with respect to the positions.

Source: conventions.md section 1 (direction cheat-sheet: a bool mask selects,
additive masks are 0 / -inf), section 2.3; pytorch/pytorch#103963 (conventions.md
section 3 item 6).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CUTOFF_LOWER = 0.0
CUTOFF_UPPER = 5.0


class CosineCutoff(nn.Module):
    def __init__(self, cutoff_upper):
        super().__init__()
        self.cutoff_upper = cutoff_upper

    def forward(self, distances):
        cutoffs = 0.5 * (torch.cos(distances * math.pi / self.cutoff_upper) + 1.0)
        return cutoffs * (distances < self.cutoff_upper).float()


class ExpNormalSmearing(nn.Module):
    def __init__(self, num_rbf=16, cutoff_upper=CUTOFF_UPPER):
        super().__init__()
        self.cutoff_fn = CosineCutoff(cutoff_upper)
        self.alpha = 5.0 / (cutoff_upper - CUTOFF_LOWER)
        start = torch.exp(torch.scalar_tensor(-cutoff_upper + CUTOFF_LOWER))
        self.register_buffer("means", torch.linspace(start, 1, num_rbf))
        self.register_buffer("betas", torch.tensor([(2 / num_rbf * (1 - start)) ** -2] * num_rbf))

    def forward(self, dist):
        dist = dist.unsqueeze(-1)
        return self.cutoff_fn(dist) * torch.exp(-self.betas * (torch.exp(self.alpha * (-dist + CUTOFF_LOWER)) - self.means) ** 2)


class DistanceFilteredAttention(nn.Module):
    def __init__(self, hidden, heads, num_rbf):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.layernorm = nn.LayerNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.dk_proj = nn.Linear(num_rbf, hidden)
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x, rbf, dist, atom_keep):
        b, n, _ = x.shape
        h = self.layernorm(x)
        q = self.q_proj(h).view(b, n, self.heads, self.head_dim)
        k = self.k_proj(h).view(b, n, self.heads, self.head_dim)
        v = self.v_proj(h).view(b, n, self.heads, self.head_dim)
        dk = F.silu(self.dk_proj(rbf)).view(b, n, n, self.heads, self.head_dim)
        scores = torch.einsum("bihd,bjhd,bijhd->bhij", q, k, dk) / math.sqrt(self.head_dim)
        eye = torch.eye(n, dtype=torch.bool, device=x.device)
        pair_keep = (atom_keep[:, :, None] & atom_keep[:, None, :]) | eye
        outside = (dist > CUTOFF_UPPER) | ~pair_keep
        scores = scores + outside[:, None]  # expect: MC509 cutoff
        attn = scores.softmax(dim=-1)
        out = torch.einsum("bhij,bjhd->bihd", attn, v).reshape(b, n, -1)
        return self.o_proj(out)


class TransformerPotential(nn.Module):
    def __init__(self, max_z=20, hidden=32, heads=4, layers=3, num_rbf=16):
        super().__init__()
        self.embedding = nn.Embedding(max_z, hidden, padding_idx=0)
        self.distance_expansion = ExpNormalSmearing(num_rbf)
        self.neighbor_embedding = nn.Linear(num_rbf, hidden)
        self.attention_layers = nn.ModuleList([DistanceFilteredAttention(hidden, heads, num_rbf) for _ in range(layers)])
        self.out_norm = nn.LayerNorm(hidden)
        self.output_network = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.SiLU(), nn.Linear(hidden // 2, 1))
        self.register_buffer("atomref", torch.zeros(max_z))

    def forward(self, z, pos):
        atom_keep = z > 0
        delta = pos[:, :, None, :] - pos[:, None, :, :]
        dist = torch.sqrt((delta ** 2).sum(-1) + 1e-9)
        rbf = self.distance_expansion(dist)
        pair = (atom_keep[:, :, None] & atom_keep[:, None, :]).float() * self.distance_expansion.cutoff_fn(dist)
        x = self.embedding(z)
        x = x + (self.neighbor_embedding(rbf) * pair[..., None] * self.embedding(z)[:, None]).sum(2)
        for attn in self.attention_layers:
            x = x + attn(x, rbf, dist, atom_keep)
        per_atom = self.output_network(self.out_norm(x)).squeeze(-1) + self.atomref[z]
        return (per_atom * atom_keep).sum(-1)


def energy_and_forces(model, z, pos):
    pos = pos.clone().requires_grad_(True)
    energy = model(z, pos)
    forces = -torch.autograd.grad(energy.sum(), pos, create_graph=model.training)[0]
    return energy, forces


def md17_batch(num_frames, generator):
    z = torch.tensor([6, 6, 6, 6, 6, 6, 8, 8, 1, 1, 1, 1, 0, 0])
    z = z.repeat(num_frames, 1)
    z[1, 11:] = 0
    pos = torch.randn(num_frames, z.size(1), 3, generator=generator) * 1.4
    energy = torch.randn(num_frames, generator=generator)
    forces = torch.randn(num_frames, z.size(1), 3, generator=generator) * (z > 0)[..., None]
    return z, pos, energy, forces


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    z, pos, e_ref, f_ref = md17_batch(3, g)
    model = TransformerPotential()
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    rho = 0.95
    for step in range(3):
        energy, forces = energy_and_forces(model, z, pos)
        loss = (1 - rho) * F.mse_loss(energy, e_ref) + rho * F.mse_loss(forces, f_ref)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("energy/force loss", round(loss.item(), 4))
    model.eval()
    energy, forces = energy_and_forces(model, z, pos)
    print("energies", [round(e, 3) for e in energy.tolist()], "max |F|", round(forces.abs().max().item(), 3))
