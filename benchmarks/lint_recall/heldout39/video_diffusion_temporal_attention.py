"""Video diffusion UNet with factorised spatial and temporal attention over variable-length clips.

Laid out after the motion module of guoyww/AnimateDiff and the video UNet of Video Diffusion
Models: ``ResnetBlock`` applied per frame, ``SpatialSelfAttention`` per frame,
``TemporalTransformerBlock`` over the frames of every spatial location with sinusoidal frame
positions, ``get_frame_bias`` for clips shorter than ``num_frames``, a linear DDPM schedule and
the epsilon-prediction loss over the real frames of each clip.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class VideoDiffusionConfig:
    in_channels: int = 1
    sample_size: int = 16
    num_frames: int = 8
    block_out_channels: tuple[int, int] = (32, 64)
    num_attention_heads: int = 4
    num_train_timesteps: int = 100


def timestep_embedding(
    timesteps: torch.Tensor, dim: int, max_period: float = 10000.0
) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=timesteps.device) / half)
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def get_frame_bias(num_frames: torch.Tensor, max_frames: int, dtype: torch.dtype) -> torch.Tensor:
    frame_keep = torch.arange(max_frames, device=num_frames.device)[None, :] < num_frames[:, None]
    bias = torch.zeros(frame_keep.shape, dtype=dtype, device=num_frames.device)
    return bias.masked_fill(~frame_keep, float("-inf"))[:, None, None, :]


class ResnetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, temb_channels: int):
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(8, in_channels), nn.GroupNorm(8, out_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, out_channels)
        self.conv_shortcut = (
            nn.Conv2d(in_channels, out_channels, 1)
            if in_channels != out_channels
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        return self.conv_shortcut(x) + self.conv2(F.silu(self.norm2(h)))


class SpatialSelfAttention(nn.Module):
    def __init__(self, channels: int, heads: int):
        super().__init__()
        self.heads, self.norm = heads, nn.GroupNorm(8, channels)
        self.to_qkv, self.to_out = nn.Linear(channels, 3 * channels), nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        tokens = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = (
            t.view(n, h * w, self.heads, -1).transpose(1, 2)
            for t in self.to_qkv(tokens).chunk(3, dim=-1)
        )
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, h * w, c)
        return x + self.to_out(out).transpose(1, 2).view(n, c, h, w)


class TemporalAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q, self.to_k = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.to_v, self.to_out = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim)

    def forward(self, hidden_states: torch.Tensor, frame_bias: torch.Tensor) -> torch.Tensor:
        n, f, d = hidden_states.shape
        q, k, v = (
            p(hidden_states).view(n, f, self.heads, -1).transpose(1, 2)
            for p in (self.to_q, self.to_k, self.to_v)
        )
        attn = (q @ k.transpose(-1, -2)) * self.scale
        attn = attn * frame_bias  # expect: MC523 videodiff
        attn = attn.softmax(dim=-1)
        return self.to_out((attn @ v).transpose(1, 2).reshape(n, f, d))


class TemporalTransformerBlock(nn.Module):
    def __init__(self, channels: int, heads: int, max_frames: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
        self.attn = TemporalAttention(channels, heads)
        self.ff = nn.Sequential(
            nn.Linear(channels, 4 * channels), nn.GELU(), nn.Linear(4 * channels, channels)
        )
        self.register_buffer(
            "pe", timestep_embedding(torch.arange(max_frames), channels), persistent=False
        )

    def forward(self, x: torch.Tensor, frame_bias: torch.Tensor, batch_size: int) -> torch.Tensor:
        bf, c, h, w = x.shape
        f = bf // batch_size
        tokens = (
            x.view(batch_size, f, c, h * w).permute(0, 3, 1, 2).reshape(batch_size * h * w, f, c)
        )
        bias = frame_bias.repeat_interleave(h * w, dim=0)
        tokens = tokens + self.attn(self.norm1(tokens + self.pe[:f]), bias)
        tokens = tokens + self.ff(self.norm2(tokens))
        return tokens.view(batch_size, h * w, f, c).permute(0, 2, 3, 1).reshape(bf, c, h, w)


class VideoUNet(nn.Module):
    def __init__(self, cfg: VideoDiffusionConfig):
        super().__init__()
        c0, c1 = cfg.block_out_channels
        heads, temb = cfg.num_attention_heads, 4 * c0
        self.time_embedding = nn.Sequential(nn.Linear(c0, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(cfg.in_channels, c0, 3, padding=1)
        self.down = ResnetBlock(c0, c0, temb)
        self.down_temporal = TemporalTransformerBlock(c0, heads, cfg.num_frames)
        self.mid = ResnetBlock(c0, c1, temb)
        self.mid_spatial = SpatialSelfAttention(c1, heads)
        self.mid_temporal = TemporalTransformerBlock(c1, heads, cfg.num_frames)
        self.up = ResnetBlock(c1 + c0, c0, temb)
        self.up_temporal = TemporalTransformerBlock(c0, heads, cfg.num_frames)
        self.conv_out = nn.Sequential(
            nn.GroupNorm(8, c0), nn.SiLU(), nn.Conv2d(c0, cfg.in_channels, 3, padding=1)
        )

    def forward(
        self, sample: torch.Tensor, timesteps: torch.Tensor, num_frames: torch.Tensor
    ) -> torch.Tensor:
        b, c, f, h, w = sample.shape
        frame_bias = get_frame_bias(num_frames, f, sample.dtype)
        temb = self.time_embedding(
            timestep_embedding(timesteps, self.conv_in.out_channels)
        ).repeat_interleave(f, dim=0)
        x = self.conv_in(sample.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w))
        skip = self.down_temporal(self.down(x, temb), frame_bias, b)
        x = F.avg_pool2d(skip, 2)
        x = self.mid_temporal(self.mid_spatial(self.mid(x, temb)), frame_bias, b)
        x = torch.cat([F.interpolate(x, scale_factor=2.0, mode="nearest"), skip], dim=1)
        x = self.up_temporal(self.up(x, temb), frame_bias, b)
        return self.conv_out(x).view(b, f, c, h, w).permute(0, 2, 1, 3, 4)


def moving_square_clips(rng: random.Random, cfg: VideoDiffusionConfig, batch: int):
    video = torch.zeros(batch, 1, cfg.num_frames, cfg.sample_size, cfg.sample_size)
    num_frames = torch.tensor([rng.randint(3, cfg.num_frames) for _ in range(batch)])
    for i in range(batch):
        x, y, dx, dy = (
            rng.randint(0, 11),
            rng.randint(0, 11),
            rng.choice([-1, 1]),
            rng.choice([-1, 1]),
        )
        for t in range(int(num_frames[i])):
            px, py = (x + dx * t) % 12, (y + dy * t) % 12
            video[i, 0, t, py : py + 4, px : px + 4] = 1.0
    return video * 2 - 1, num_frames


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), VideoDiffusionConfig()
    betas = torch.linspace(1e-4, 0.02, cfg.num_train_timesteps)
    alphas_cumprod = torch.cumprod(1 - betas, dim=0)
    unet = VideoUNet(cfg)
    opt = torch.optim.AdamW(unet.parameters(), lr=2e-4)
    for step in range(40):
        video, num_frames = moving_square_clips(rng, cfg, 8)
        t = torch.randint(0, cfg.num_train_timesteps, (8,))
        noise, a = torch.randn_like(video), alphas_cumprod[t].view(-1, 1, 1, 1, 1)
        noisy = a.sqrt() * video + (1 - a).sqrt() * noise
        frame_keep = torch.arange(cfg.num_frames)[None] < num_frames[:, None]
        err = (unet(noisy, t, num_frames) - noise).pow(2).mean(dim=(1, 3, 4))
        loss = err[frame_keep].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    unet.eval()
    video, num_frames = moving_square_clips(rng, cfg, 4)
    t = torch.full((4,), 50)
    with torch.no_grad():
        out = unet(video, t, num_frames)
        n = int(num_frames[0])
        alone = unet(video[:1, :, :n], t[:1], num_frames[:1])
    print(f"first clip alone vs padded: {(alone[0] - out[0, :, :n]).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
