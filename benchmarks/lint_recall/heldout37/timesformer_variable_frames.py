"""TimeSformer with divided space-time attention over clips of different lengths.

Layout of facebookresearch/TimeSformer (timesformer/models/vit.py: PatchEmbed, Attention, Block
with attention_type="divided_space_time", VisionTransformer with time_embed).
Source: conventions.md §2.9 and §1 (HF 4-D masks row), transformers
models/llama/modeling_llama.py:eager_attention_forward (quoted in conventions.md §2.9).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TimeSformerConfig:
    img_size: int = 16
    patch_size: int = 4
    in_chans: int = 3
    num_classes: int = 4
    num_frames: int = 8
    embed_dim: int = 64
    depth: int = 2
    num_heads: int = 4
    drop_rate: float = 0.0


class PatchEmbed(nn.Module):
    def __init__(self, cfg: TimeSformerConfig) -> None:
        super().__init__()
        self.num_patches = (cfg.img_size // cfg.patch_size) ** 2
        self.proj = nn.Conv2d(
            cfg.in_chans, cfg.embed_dim, kernel_size=cfg.patch_size, stride=cfg.patch_size
        )

    def forward(self, x: torch.Tensor):
        b, c, t, h, w = x.shape
        x = self.proj(x.transpose(1, 2).reshape(b * t, c, h, w))
        width = x.size(-1)
        return x.flatten(2).transpose(1, 2), t, width


def to_frames(x: torch.Tensor, b: int, t: int) -> torch.Tensor:
    return x.reshape(b, -1, t, x.size(-1)).transpose(1, 2).reshape(b * t, -1, x.size(-1))


def from_frames(x: torch.Tensor, b: int, t: int) -> torch.Tensor:
    return x.reshape(b, t, -1, x.size(-1)).transpose(1, 2).reshape(b, -1, x.size(-1))


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = (
            self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            attn = attn + mask  # expect: MC509 timesformer
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.temporal_norm1 = nn.LayerNorm(dim)
        self.temporal_attn = Attention(dim, num_heads)
        self.temporal_fc = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, B: int, T: int, W: int, frame_keep: torch.Tensor):
        num_spatial_tokens = (x.size(1) - 1) // T
        H = num_spatial_tokens // W
        # temporal
        xt = x[:, 1:, :].reshape(B * H * W, T, -1)
        temporal_mask = frame_keep.repeat_interleave(H * W, dim=0)[:, None, None, :]
        res_temporal = self.temporal_attn(self.temporal_norm1(xt), mask=temporal_mask)
        res_temporal = res_temporal.reshape(B, H * W * T, -1)
        xt = x[:, 1:, :] + self.temporal_fc(res_temporal)
        # spatial
        init_cls_token = x[:, 0, :].unsqueeze(1)
        cls_token = init_cls_token.repeat(1, T, 1).reshape(B * T, 1, -1)
        xs = to_frames(xt, B, T)
        xs = torch.cat((cls_token, xs), 1)
        res_spatial = self.attn(self.norm1(xs))
        cls_token = res_spatial[:, 0, :].reshape(B, T, -1)
        keep = frame_keep.unsqueeze(-1).to(cls_token.dtype)
        cls_token = (cls_token * keep).sum(1, keepdim=True) / keep.sum(1, keepdim=True)
        res_spatial = from_frames(res_spatial[:, 1:, :], B, T)
        x = torch.cat((init_cls_token, xt), 1) + torch.cat((cls_token, res_spatial), 1)
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: TimeSformerConfig) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(cfg)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, cfg.embed_dim) * 0.02)
        self.time_embed = nn.Parameter(torch.zeros(1, cfg.num_frames, cfg.embed_dim))
        self.blocks = nn.ModuleList(Block(cfg.embed_dim, cfg.num_heads) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.embed_dim)
        self.head = nn.Linear(cfg.embed_dim, cfg.num_classes)

    def forward_features(self, x: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        x, T, W = self.patch_embed(x)
        frame_keep = torch.arange(T, device=x.device)[None, :] < num_frames[:, None]
        cls_tokens = self.cls_token.expand(x.size(0), -1, -1)
        x = torch.cat((cls_tokens, x), dim=1) + self.pos_embed
        cls_tokens = x[:B, 0, :].unsqueeze(1)
        x = from_frames(x[:, 1:], B, T).reshape(-1, T, x.size(-1))
        x = x + self.time_embed[:, :T]
        x = x.reshape(B, -1, x.size(-1))
        x = torch.cat((cls_tokens, x), dim=1)
        for blk in self.blocks:
            x = blk(x, B, T, W, frame_keep)
        return self.norm(x)[:, 0]

    def forward(self, x: torch.Tensor, num_frames: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x, num_frames))


DIRECTIONS = [(0, 1), (0, -1), (1, 0), (-1, 0)]


def make_clips(cfg: TimeSformerConfig, n: int, gen: torch.Generator):
    videos = torch.zeros(n, cfg.in_chans, cfg.num_frames, cfg.img_size, cfg.img_size)
    labels = torch.randint(0, len(DIRECTIONS), (n,), generator=gen)
    num_frames = torch.randint(3, cfg.num_frames + 1, (n,), generator=gen)
    for i in range(n):
        dy, dx = DIRECTIONS[int(labels[i])]
        y, x = (int(v) for v in torch.randint(4, cfg.img_size - 8, (2,), generator=gen))
        for t in range(int(num_frames[i])):
            yy, xx = (y + dy * t) % (cfg.img_size - 3), (x + dx * t) % (cfg.img_size - 3)
            videos[i, :, t, yy : yy + 3, xx : xx + 3] = 1.0
    videos[:, :, :] += 0.1 * torch.randn(videos.shape, generator=gen)
    frame_pad = torch.arange(cfg.num_frames)[None, :] >= num_frames[:, None]
    videos = videos.masked_fill(frame_pad[:, None, :, None, None], 0.0)
    return {"video": videos, "num_frames": num_frames, "label": labels}


def evaluate(model: VisionTransformer, batch: dict) -> float:
    model.eval()
    with torch.no_grad():
        logits = model(batch["video"], batch["num_frames"])
    model.train()
    return (logits.argmax(-1) == batch["label"]).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    config = TimeSformerConfig()
    model = VisionTransformer(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    gen = torch.Generator().manual_seed(0)
    for step in range(150):
        batch = make_clips(config, 16, gen)
        loss = F.cross_entropy(model(batch["video"], batch["num_frames"]), batch["label"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    test = make_clips(config, 128, gen)
    print("clip accuracy", evaluate(model, test))
    model.eval()
    i = int(test["num_frames"].argmin())
    clip = {k: v[i : i + 1] for k, v in test.items()}
    noisy, n = clip["video"].clone(), int(clip["num_frames"][0])
    noisy[:, :, n:] = torch.randn_like(noisy[:, :, n:])
    with torch.no_grad():
        a = model(clip["video"], clip["num_frames"])
        b = model(noisy, clip["num_frames"])
    print("padded frames changed -> logits moved by", (a - b).abs().max().item())
