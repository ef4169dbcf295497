"""Precipitation nowcasting with an autoregressive factorised space-time transformer.

Radar frames are cut into patches; each `SpaceTimeBlock` runs spatial attention inside a frame,
then temporal attention per patch location over the frame sequence with a causal mask and a
key mask for frames lost to radar outages, then an MLP (the divided attention used by
TimeSformer-like and Earthformer-like nowcasting models). Training is next-frame prediction
with teacher forcing; evaluation rolls out three frames and reports MSE and the critical
success index against persistence.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask) and §7 Q3;
conventions.md §3 item 27; conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class NowcastConfig:
    image_size: int = 16
    patch_size: int = 4
    in_frames: int = 6
    out_frames: int = 3
    embed_dim: int = 64
    num_heads: int = 4
    depth: int = 2
    csi_threshold: float = 1.0

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def temporal_causal_mask(num_frames: int, device=None) -> torch.Tensor:
    return torch.triu(torch.ones(num_frames, num_frames, device=device), diagonal=1) * float("-inf")  # expect: MC522 nowcast


class MultiHeadAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_bias=None, key_keep=None):
        B, L, C = x.shape
        q, k, v = (
            self.qkv(x).view(B, L, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.num_heads)
        if attn_bias is not None:
            scores = scores + attn_bias
        if key_keep is not None:
            scores = scores.masked_fill(~key_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, L, C))


class SpaceTimeBlock(nn.Module):
    def __init__(self, cfg: NowcastConfig):
        super().__init__()
        d = cfg.embed_dim
        self.norm_s, self.norm_t, self.norm_m = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.spatial_attn = MultiHeadAttention(d, cfg.num_heads)
        self.temporal_attn = MultiHeadAttention(d, cfg.num_heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, causal_bias, frame_keep):
        B, T, N, C = x.shape
        xs = x.reshape(B * T, N, C)
        x = x + self.spatial_attn(self.norm_s(xs)).view(B, T, N, C)
        xt = x.permute(0, 2, 1, 3).reshape(B * N, T, C)
        keep = frame_keep.repeat_interleave(N, dim=0)
        xt = self.temporal_attn(self.norm_t(xt), attn_bias=causal_bias, key_keep=keep)
        x = x + xt.view(B, N, T, C).permute(0, 2, 1, 3)
        return x + self.mlp(self.norm_m(x))


class SpaceTimeNowcaster(nn.Module):
    def __init__(self, cfg: NowcastConfig):
        super().__init__()
        self.cfg = cfg
        d, p = cfg.embed_dim, cfg.patch_size
        max_frames = cfg.in_frames + cfg.out_frames
        self.patch_embed = nn.Conv2d(1, d, kernel_size=p, stride=p)
        self.pos_embed = nn.Parameter(torch.randn(1, 1, cfg.num_patches, d) * 0.02)
        self.time_embed = nn.Parameter(torch.randn(1, max_frames, 1, d) * 0.02)
        self.blocks = nn.ModuleList(SpaceTimeBlock(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, p * p)

    def forward(self, frames, frame_keep):
        """frames (B, T, H, W) -> prediction of frames 1..T from frames 0..T-1."""
        B, T, H, W = frames.shape
        p, g = self.cfg.patch_size, self.cfg.image_size // self.cfg.patch_size
        frames = frames * frame_keep[:, :, None, None]
        x = self.patch_embed(torch.log1p(frames).reshape(B * T, 1, H, W))
        x = x.flatten(2).transpose(1, 2).view(B, T, -1, self.cfg.embed_dim)
        x = x + self.pos_embed + self.time_embed[:, :T]
        causal_bias = temporal_causal_mask(T, frames.device)
        for blk in self.blocks:
            x = blk(x, causal_bias, frame_keep)
        out = self.head(self.norm(x)).view(B, T, g, g, p, p)
        out = out.permute(0, 1, 2, 4, 3, 5).reshape(B, T, H, W)
        return torch.expm1(F.softplus(out))

    @torch.no_grad()
    def rollout(self, context, context_keep, steps: int):
        frames, keep = context, context_keep
        for _ in range(steps):
            nxt = self(frames, keep)[:, -1:]
            frames = torch.cat([frames, nxt], dim=1)
            keep = torch.cat([keep, keep.new_ones(keep.shape[0], 1)], dim=1)
        return frames[:, context.shape[1] :]


def make_sequences(n: int, cfg: NowcastConfig, gen: torch.Generator):
    T = cfg.in_frames + cfg.out_frames
    yy, xx = torch.meshgrid(
        torch.arange(cfg.image_size).float(), torch.arange(cfg.image_size).float(), indexing="ij"
    )
    seqs = torch.zeros(n, T, cfg.image_size, cfg.image_size)
    for i in range(n):
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            cy, cx = (torch.rand(2, generator=gen) * cfg.image_size).tolist()
            vy, vx = ((torch.rand(2, generator=gen) - 0.5) * 2.0).tolist()
            sigma = 1.5 + 2.0 * float(torch.rand(1, generator=gen))
            peak = 2.0 + 6.0 * float(torch.rand(1, generator=gen))
            growth = 1.0 + 0.1 * float(torch.randn(1, generator=gen))
            for t in range(T):
                d2 = (yy - cy - vy * t) ** 2 + (xx - cx - vx * t) ** 2
                seqs[i, t] += peak * growth**t * torch.exp(-d2 / (2 * sigma**2))
    keep = torch.ones(n, T, dtype=torch.bool)
    outage = torch.rand(n, generator=gen) < 0.3
    lost = torch.randint(1, cfg.in_frames, (n,), generator=gen)
    keep[outage, lost[outage]] = False
    return seqs, keep


def csi(pred, obs, threshold):
    hits = ((pred >= threshold) & (obs >= threshold)).sum()
    misses = ((pred < threshold) & (obs >= threshold)).sum()
    false_alarms = ((pred >= threshold) & (obs < threshold)).sum()
    return (hits / (hits + misses + false_alarms).clamp(min=1)).item()


def main():
    torch.manual_seed(0)
    cfg = NowcastConfig()
    model = SpaceTimeNowcaster(cfg)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(80):
        seqs, keep = make_sequences(16, cfg, gen)
        pred = model(seqs[:, :-1], keep[:, :-1])
        valid = keep[:, 1:, None, None].float()
        loss = ((pred - seqs[:, 1:]) ** 2 * valid).sum() / (valid.sum() * cfg.image_size**2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step}: next-frame MSE {loss.item():.4f}")
    model.eval()
    seqs, keep = make_sequences(32, cfg, torch.Generator().manual_seed(1))
    context, target = seqs[:, : cfg.in_frames], seqs[:, cfg.in_frames :]
    forecast = model.rollout(context, keep[:, : cfg.in_frames], cfg.out_frames)
    persistence = context[:, -1:].expand_as(target)
    for name, pred in (("model", forecast), ("persistence", persistence)):
        mse = F.mse_loss(pred, target).item()
        score = csi(pred, target, cfg.csi_threshold)
        print(f"{name}: MSE {mse:.4f}, CSI@{cfg.csi_threshold} {score:.3f}")


if __name__ == "__main__":
    main()
