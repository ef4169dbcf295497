"""Graph transformer for OC20-style adsorption energies (IS2RE) on slab + adsorbate systems.

Atoms are tagged (0 = fixed subsurface, 1 = surface, 2 = adsorbate), distances use
the minimum image along the periodic cell vectors, attention is restricted to a
radius graph and biased by a Gaussian smearing of the distance, and the energy is
read out from the surface and adsorbate atoms only.

Source: huggingface/transformers PR #27114 (conventions.md section 3 item 15),
NVIDIA-NeMo/Automodel PR #2658 (item 16); conventions.md section 2.3, section 5 item 4.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = SimpleNamespace(hidden=32, heads=4, layers=2, num_gaussians=20, cutoff=6.0, max_z=84)


def minimum_image_distance(pos, cell):
    delta = pos[:, :, None, :] - pos[:, None, :, :]
    frac = delta @ torch.linalg.inv(cell)[:, None]
    frac[..., :2] = frac[..., :2] - torch.round(frac[..., :2])
    return (frac @ cell[:, None]).norm(dim=-1)


class GaussianSmearing(nn.Module):
    def __init__(self, start=0.0, stop=CONFIG.cutoff, num_gaussians=CONFIG.num_gaussians):
        super().__init__()
        offset = torch.linspace(start, stop, num_gaussians)
        self.coeff = -0.5 / (offset[1] - offset[0]).item() ** 2
        self.register_buffer("offset", offset)

    def forward(self, dist):
        return torch.exp(self.coeff * (dist[..., None] - self.offset) ** 2)


def radius_bias(dist, cutoff, dtype):
    return torch.zeros_like(dist, dtype=dtype).masked_fill(dist > cutoff, torch.finfo(dtype).min)


def padding_bias(atom_mask, dtype):
    return torch.zeros(atom_mask.shape, dtype=dtype).masked_fill(~atom_mask, torch.finfo(dtype).min)[:, None, :]


class RadiusAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.edge = nn.Linear(cfg.num_gaussians, cfg.heads)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden)
        self.mlp = nn.Sequential(nn.LayerNorm(cfg.hidden), nn.Linear(cfg.hidden, 2 * cfg.hidden), nn.SiLU(), nn.Linear(2 * cfg.hidden, cfg.hidden))

    def forward(self, h, rbf, mask):
        b, n, d = h.shape
        q, k, v = self.qkv(self.norm(h)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5
        scores = scores + self.edge(rbf).permute(0, 3, 1, 2) + mask[:, None]
        attn = scores.softmax(-1)
        h = h + self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
        return h + self.mlp(h)


class AdsorptionTransformer(nn.Module):
    def __init__(self, cfg=CONFIG):
        super().__init__()
        self.cfg = cfg
        self.atom_emb = nn.Embedding(cfg.max_z + 1, cfg.hidden, padding_idx=0)
        self.tag_emb = nn.Embedding(3, cfg.hidden)
        self.smearing = GaussianSmearing()
        self.blocks = nn.ModuleList([RadiusAttention(cfg) for _ in range(cfg.layers)])
        self.energy_head = nn.Sequential(nn.LayerNorm(cfg.hidden), nn.Linear(cfg.hidden, 1))

    def forward(self, atomic_numbers, tags, pos, cell):
        atom_mask = atomic_numbers > 0
        dist = minimum_image_distance(pos, cell)
        dtype = self.atom_emb.weight.dtype
        mask = radius_bias(dist, self.cfg.cutoff, dtype) + padding_bias(atom_mask, dtype)  # expect: MC513 sum
        rbf = self.smearing(dist.clamp(max=self.cfg.cutoff))
        h = self.atom_emb(atomic_numbers) + self.tag_emb(tags)
        for block in self.blocks:
            h = block(h, rbf, mask)
        per_atom = self.energy_head(h).squeeze(-1)
        readout = atom_mask & (tags > 0)
        return (per_atom * readout).sum(-1)


def collate_systems(systems):
    n = max(s["z"].numel() for s in systems)
    out = {
        "atomic_numbers": torch.zeros(len(systems), n, dtype=torch.long),
        "tags": torch.zeros(len(systems), n, dtype=torch.long),
        "pos": torch.zeros(len(systems), n, 3),
        "cell": torch.stack([s["cell"] for s in systems]),
    }
    for i, s in enumerate(systems):
        k = s["z"].numel()
        out["atomic_numbers"][i, :k] = s["z"]
        out["tags"][i, :k] = s["tags"]
        out["pos"][i, :k] = s["pos"]
    return out


def random_system(n_slab, n_ads, generator):
    cell = torch.diag(torch.tensor([8.0, 8.0, 30.0]))
    slab = torch.rand(n_slab, 3, generator=generator) * torch.tensor([8.0, 8.0, 6.0])
    ads = torch.rand(n_ads, 3, generator=generator) * torch.tensor([3.0, 3.0, 2.0]) + torch.tensor([2.5, 2.5, 7.5])
    tags = torch.cat([(slab[:, 2] > 3.0).long(), torch.full((n_ads,), 2)])
    z = torch.cat([torch.full((n_slab,), 29), torch.randint(1, 9, (n_ads,), generator=generator)])
    return {"z": z, "tags": tags, "pos": torch.cat([slab, ads]), "cell": cell}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    batch = collate_systems([random_system(8, 3, g), random_system(6, 2, g), random_system(9, 1, g)])
    y_relaxed = torch.tensor([-0.82, 0.35, -1.41])
    model = AdsorptionTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(3):
        loss = F.l1_loss(model(**batch), y_relaxed)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("energy mae", round(loss.item(), 4))
