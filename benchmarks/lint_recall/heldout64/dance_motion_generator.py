"""Music-to-dance motion generation (AIST++ style) as a Lightning module.

Poses are 24 joints x 6-D rotations plus root velocity, flattened per frame. An autoregressive
decoder predicts the next pose from past poses and cross-attends to the music features (onset
strength, chroma, MFCC frames; padded clips carry ``music_mask``). ``generate`` rolls the model out
from a short seed motion with a per-layer key/value cache.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7, section 5 item 8; pytorch/pytorch PR #111007
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
            pass

        def save_hyperparameters(self, *args, **kwargs):
            pass


@dataclass
class DanceConfig:
    pose_dim: int = 24 * 6 + 3
    music_dim: int = 35
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_frames: int = 240
    lr: float = 1e-4
    velocity_weight: float = 0.5


class MotionDecoderLayer(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.self_out = nn.Linear(d, d)
        self.q_music = nn.Linear(d, d)
        self.kv_music = nn.Linear(d, 2 * d)
        self.cross_out = nn.Linear(d, d)
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3))
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.h, d // self.h).transpose(1, 2)

    def merge(self, x):
        b, h, t, dh = x.shape
        return x.transpose(1, 2).reshape(b, t, h * dh)

    def forward(self, x, music, music_keep, cache=None):
        q, k, v = map(self.split, self.qkv(self.norms[0](x)).chunk(3, dim=-1))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        x = x + self.self_out(self.merge(a))
        qm = self.split(self.q_music(self.norms[1](x)))
        km, vm = map(self.split, self.kv_music(music).chunk(2, dim=-1))
        c = F.scaled_dot_product_attention(qm, km, vm, attn_mask=music_keep[:, None, None, :])
        x = x + self.cross_out(self.merge(c))
        return x + self.ff(self.norms[2](x))


class DanceDecoder(nn.Module):
    def __init__(self, cfg: DanceConfig):
        super().__init__()
        self.pose_in = nn.Linear(cfg.pose_dim, cfg.d_model)
        self.music_in = nn.Linear(cfg.music_dim, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_frames, cfg.d_model)
        self.layers = nn.ModuleList(MotionDecoderLayer(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.pose_out = nn.Linear(cfg.d_model, cfg.pose_dim)

    def forward(self, poses, music, music_mask, caches=None, offset=0):
        t = poses.size(1)
        x = self.pose_in(poses) + self.pos(torch.arange(offset, offset + t, device=poses.device))
        m = self.music_in(music) + self.pos(torch.arange(music.size(1), device=music.device))
        for i, layer in enumerate(self.layers):
            x = layer(x, m, music_mask, None if caches is None else caches[i])
        return self.pose_out(x)


class DanceModule(LightningModule):
    def __init__(self, cfg: DanceConfig):
        super().__init__()
        self.save_hyperparameters()
        self.cfg = cfg
        self.decoder = DanceDecoder(cfg)

    def forward(self, poses, music, music_mask):
        return self.decoder(poses, music, music_mask)

    def training_step(self, batch, batch_idx):
        poses = batch["poses"]
        pred = self(poses[:, :-1], batch["music"], batch["music_mask"])
        target = poses[:, 1:]
        rec = F.mse_loss(pred, target)
        vel = F.mse_loss(pred[:, 1:] - pred[:, :-1], target[:, 1:] - target[:, :-1])
        loss = rec + self.cfg.velocity_weight * vel
        self.log_dict_safe({"train/rec": rec, "train/vel": vel})
        return loss

    def log_dict_safe(self, metrics):
        for k, v in metrics.items():
            self.log(k, v.detach(), on_step=True, on_epoch=False)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.cfg.lr, betas=(0.9, 0.98))

    @torch.no_grad()
    def generate(self, seed_poses, music, music_mask, n_frames: int):
        caches = [dict() for _ in self.decoder.layers]
        out = self.decoder(seed_poses, music, music_mask, caches=caches, offset=0)
        frames = [out[:, -1:]]
        t = seed_poses.size(1)
        for _ in range(n_frames - 1):
            nxt = self.decoder(frames[-1], music, music_mask, caches=caches, offset=t)
            frames.append(nxt)
            t += 1
        return torch.cat(frames, dim=1)


def random_clips(cfg: DanceConfig, lengths=(20, 14), seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    music_mask = torch.arange(t)[None] < torch.tensor(lengths)[:, None]
    return {
        "poses": torch.randn(b, t, cfg.pose_dim, generator=g) * 0.1,
        "music": torch.randn(b, t, cfg.music_dim, generator=g) * music_mask[..., None],
        "music_mask": music_mask,
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = DanceConfig()
    module = DanceModule(cfg)
    opt = module.configure_optimizers()
    for step in range(3):
        loss = module.training_step(random_clips(cfg, seed=step), step)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.5f}")
    module.eval()
    clip = random_clips(cfg, lengths=(16,), seed=7)
    motion = module.generate(clip["poses"][:, :4], clip["music"], clip["music_mask"], n_frames=6)
    print("generated motion", tuple(motion.shape), "finite", bool(torch.isfinite(motion).all()))
