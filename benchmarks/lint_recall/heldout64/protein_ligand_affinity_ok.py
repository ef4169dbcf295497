"""Protein-ligand binding affinity (pKd) regression as a PyTorch Lightning module.

Ligand atoms attend to each other (bond-agnostic self-attention over heavy atoms), then to the
residues of the binding pocket through a distance-gated sigmoid cross-attention: a residue is a
candidate partner of an atom only if both are real (not padding) and closer than ``cutoff``.
Pooled atom states give the affinity. PDBbind-style batches are padded on both the atom and the
residue axis.

Source: seed masked_fill_inplace.txt (注意（原地操作的坑）: 梯度计算风险; 总结 item 2)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from lightning import LightningModule
except ImportError:
    class LightningModule(nn.Module):
        def log(self, name, value, **kwargs):
            self.__dict__.setdefault("_logged", {})[name] = float(torch.as_tensor(value).detach())

        def log_dict(self, metrics, **kwargs):
            for name, value in metrics.items():
                self.log(name, value, **kwargs)


@dataclass
class AffinityConfig:
    atom_dim: int = 16
    residue_dim: int = 24
    hidden: int = 64
    heads: int = 4
    cutoff: float = 8.0
    rbf_bins: int = 16
    lr: float = 2e-4
    weight_decay: float = 1e-2


class RBF(nn.Module):
    def __init__(self, bins: int, cutoff: float):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0.0, cutoff, bins))
        self.gamma = (bins / cutoff) ** 2

    def forward(self, d):
        return torch.exp(-self.gamma * (d[..., None] - self.centers) ** 2)


class PocketCrossAttention(nn.Module):
    def __init__(self, cfg: AffinityConfig):
        super().__init__()
        self.h = cfg.heads
        self.dk = cfg.hidden // cfg.heads
        self.q = nn.Linear(cfg.hidden, cfg.hidden)
        self.kv = nn.Linear(cfg.hidden, 2 * cfg.hidden)
        self.dist_bias = nn.Linear(cfg.rbf_bins, cfg.heads)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, atoms, residues, rbf, pocket_keep):
        b, a, _ = atoms.shape
        r = residues.size(1)
        q = self.q(atoms).view(b, a, self.h, self.dk).transpose(1, 2)
        k, v = self.kv(residues).view(b, r, 2, self.h, self.dk).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhad,bhrd->bhar", q, k) / self.dk ** 0.5
        scores = scores + self.dist_bias(rbf).permute(0, 3, 1, 2)
        gate = torch.sigmoid(scores)
        gate = gate.masked_fill(~pocket_keep[:, None], 0.0)
        norm = gate.sum(dim=-1, keepdim=True).clamp(min=1.0)
        ctx = torch.einsum("bhar,bhrd->bhad", gate, v) / norm
        return self.out(ctx.transpose(1, 2).reshape(b, a, -1))


class AffinityNet(nn.Module):
    def __init__(self, cfg: AffinityConfig):
        super().__init__()
        self.cfg = cfg
        self.atom_in = nn.Linear(cfg.atom_dim, cfg.hidden)
        self.res_in = nn.Linear(cfg.residue_dim, cfg.hidden)
        self.rbf = RBF(cfg.rbf_bins, cfg.cutoff)
        self.ligand_sa = nn.MultiheadAttention(cfg.hidden, cfg.heads, batch_first=True)
        self.cross = PocketCrossAttention(cfg)
        self.norm1 = nn.LayerNorm(cfg.hidden)
        self.norm2 = nn.LayerNorm(cfg.hidden)
        self.readout = nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.SiLU(), nn.Linear(cfg.hidden, 1))

    def forward(self, batch):
        atom_keep, res_keep = batch["atom_mask"], batch["residue_mask"]
        dist = torch.cdist(batch["atom_pos"], batch["residue_pos"])
        pocket_keep = atom_keep[:, :, None] & res_keep[:, None, :] & (dist < self.cfg.cutoff)
        x = self.atom_in(batch["atom_feats"])
        y = self.res_in(batch["residue_feats"])
        sa, _ = self.ligand_sa(x, x, x, key_padding_mask=~atom_keep, need_weights=False)
        x = self.norm1(x + sa)
        x = self.norm2(x + self.cross(x, y, self.rbf(dist), pocket_keep))
        w = atom_keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * w).sum(1) / w.sum(1).clamp(min=1.0)
        return self.readout(pooled).squeeze(-1)


class AffinityModule(LightningModule):
    def __init__(self, cfg: AffinityConfig):
        super().__init__()
        self.cfg = cfg
        self.net = AffinityNet(cfg)

    def forward(self, batch):
        return self.net(batch)

    def training_step(self, batch, batch_idx):
        pred = self(batch)
        loss = F.smooth_l1_loss(pred, batch["pkd"])
        self.log("train/loss", loss, prog_bar=True, batch_size=pred.size(0))
        return loss

    def validation_step(self, batch, batch_idx):
        pred = self(batch)
        rmse = torch.sqrt(F.mse_loss(pred, batch["pkd"]))
        pc = torch.corrcoef(torch.stack([pred, batch["pkd"]]))[0, 1]
        self.log_dict({"val/rmse": rmse, "val/pearson": pc}, batch_size=pred.size(0))
        return rmse

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


def random_complexes(cfg: AffinityConfig, n_atoms=(7, 11, 9), n_res=(14, 10, 18), seed=0):
    g = torch.Generator().manual_seed(seed)
    b, a, r = len(n_atoms), max(n_atoms), max(n_res)
    atom_mask = torch.arange(a)[None, :] < torch.tensor(n_atoms)[:, None]
    residue_mask = torch.arange(r)[None, :] < torch.tensor(n_res)[:, None]
    return {
        "atom_feats": torch.randn(b, a, cfg.atom_dim, generator=g),
        "residue_feats": torch.randn(b, r, cfg.residue_dim, generator=g),
        "atom_pos": torch.randn(b, a, 3, generator=g) * 2.0,
        "residue_pos": torch.randn(b, r, 3, generator=g) * 6.0,
        "atom_mask": atom_mask,
        "residue_mask": residue_mask,
        "pkd": 4.0 + 6.0 * torch.rand(b, generator=g),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = AffinityConfig()
    module = AffinityModule(cfg)
    val_batch = random_complexes(cfg)
    module.eval()
    with torch.no_grad():
        rmse = module.validation_step(val_batch, 0)
        preds = module(val_batch)
    print("val rmse", round(rmse.item(), 4), "preds", [round(p, 3) for p in preds.tolist()])
    assert torch.isfinite(preds).all()
    print("optimizer", type(module.configure_optimizers()["optimizer"]).__name__)
