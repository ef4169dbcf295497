"""Masked autoencoder for images of different sizes padded onto a common canvas.

Each image covers only part of the patch grid; `valid` marks its real patches. Random masking
ranks patches by noise (padding last) and keeps a share of each image's real patches; the
kept lists are cut to the longest one, so a smaller image fills its trailing slots with
patches it does not keep, which the encoder hides as keys. A light decoder restores the full
grid with mask tokens and runs one attention block over the real patches; the loss is taken
on masked real patches only.

Source: masked_fill_inplace.txt, section 非原地操作 masked_fill (seed)
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MAEConfig:
    patch_dim: int = 48
    grid: int = 16
    dim: int = 32
    heads: int = 4
    depth: int = 2
    mask_ratio: float = 0.5


class Block(nn.Module):
    def __init__(self, cfg: MAEConfig):
        super().__init__()
        self.heads = cfg.heads
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.qkv, self.proj = nn.Linear(cfg.dim, 3 * cfg.dim), nn.Linear(cfg.dim, cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, key_valid):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * (d // self.heads) ** -0.5
        scores.masked_fill(~key_valid[:, None, None, :], float("-inf"))  # expect: MC525 mae
        out = torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v)
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class MaskedAutoencoder(nn.Module):
    def __init__(self, cfg: MAEConfig):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = nn.Linear(cfg.patch_dim, cfg.dim)
        self.pos = nn.Parameter(torch.randn(1, cfg.grid, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.decoder_block = Block(cfg)
        self.decoder_pred = nn.Linear(cfg.dim, cfg.patch_dim)

    def random_masking(self, valid):
        b, n = valid.shape
        num_keep = (valid.sum(1) * (1 - self.cfg.mask_ratio)).ceil().long()
        noise = torch.rand(b, n, device=valid.device) + (~valid).float()
        ids_shuffle = noise.argsort(dim=1)
        ids_restore = ids_shuffle.argsort(dim=1)
        width = int(num_keep.max())
        kept_valid = torch.arange(width, device=valid.device)[None, :] < num_keep[:, None]
        return ids_shuffle[:, :width], ids_restore, kept_valid

    def forward(self, patches, valid):
        ids_keep, ids_restore, kept_valid = self.random_masking(valid)
        x = self.patch_embed(patches) + self.pos
        x = torch.gather(x, 1, ids_keep[..., None].expand(-1, -1, x.size(-1)))
        for block in self.blocks:
            x = block(x, kept_valid)
        x = torch.where(kept_valid[..., None], x, self.mask_token)
        full = torch.cat([x, self.mask_token.expand(x.size(0), ids_restore.size(1) - x.size(1), -1)], dim=1)
        full = torch.gather(full, 1, ids_restore[..., None].expand(-1, -1, full.size(-1)))
        recon = self.decoder_pred(self.decoder_block(full + self.pos, valid))
        masked = valid & ~torch.zeros_like(valid).scatter(1, ids_keep, kept_valid)
        return (F.mse_loss(recon, patches, reduction="none").mean(-1) * masked).sum() / masked.sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = MAEConfig()
    model = MaskedAutoencoder(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    real_patches = torch.tensor([16, 12, 6, 4])
    valid = torch.arange(cfg.grid)[None, :] < real_patches[:, None]
    patches = torch.randn(4, cfg.grid, cfg.patch_dim) * valid[..., None]
    for step in range(5):
        loss = model(patches, valid)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
