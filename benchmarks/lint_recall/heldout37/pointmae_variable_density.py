"""Point-MAE-style point cloud classifier over scans with different numbers of points.

Layout of Pang-Yatian/Point-MAE (models/Point_MAE.py: Group with FPS + kNN, a mini-PointNet
Encoder, pos_embed from the centers, TransformerEncoder of Blocks, cls token + max pooling head).
Source: conventions.md §2.6, §1 (SDPA row) and §5 item 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class PointConfig:
    num_group: int = 15
    group_size: int = 8
    min_points: int = 48
    max_points: int = 160
    trans_dim: int = 64
    encoder_dims: int = 64
    depth: int = 3
    num_heads: int = 4
    cls_dim: int = 4
    drop_path_rate: float = 0.0


def farthest_point_sample(xyz: torch.Tensor, npoint: int) -> torch.Tensor:
    n = xyz.shape[0]
    centroids = torch.zeros(npoint, dtype=torch.long)
    distance = torch.full((n,), 1e10)
    farthest = 0
    for i in range(npoint):
        centroids[i] = farthest
        distance = torch.minimum(distance, ((xyz - xyz[farthest]) ** 2).sum(-1))
        farthest = int(distance.argmax())
    return centroids


class Group(nn.Module):
    def __init__(self, num_group: int, group_size: int) -> None:
        super().__init__()
        self.num_group, self.group_size = num_group, group_size

    def forward(self, xyz: torch.Tensor, num_points: torch.Tensor):
        batch_size = xyz.shape[0]
        neighborhood = xyz.new_zeros(batch_size, self.num_group, self.group_size, 3)
        center = xyz.new_zeros(batch_size, self.num_group, 3)
        num_centers = torch.clamp(num_points // (2 * self.group_size), max=self.num_group)
        for b in range(batch_size):
            pts, g = xyz[b, : num_points[b]], int(num_centers[b])
            center[b, :g] = pts[farthest_point_sample(pts, g)]
            idx = torch.cdist(center[b, :g], pts).topk(self.group_size, largest=False).indices
            neighborhood[b, :g] = pts[idx] - center[b, :g, None, :]
        center_valid = torch.arange(self.num_group)[None, :] < num_centers[:, None]
        return neighborhood, center, center_valid


class Encoder(nn.Module):
    def __init__(self, encoder_channel: int) -> None:
        super().__init__()
        self.first_conv = nn.Sequential(
            nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU(inplace=True), nn.Conv1d(64, 128, 1)
        )
        self.second_conv = nn.Sequential(
            nn.Conv1d(256, 256, 1),
            nn.BatchNorm1d(256),
            nn.ReLU(inplace=True),
            nn.Conv1d(256, encoder_channel, 1),
        )
        self.encoder_channel = encoder_channel

    def forward(self, point_groups: torch.Tensor) -> torch.Tensor:
        bs, g, n, _ = point_groups.shape
        feature = self.first_conv(point_groups.reshape(bs * g, n, 3).transpose(2, 1))
        feature_global = torch.max(feature, dim=2, keepdim=True)[0]
        feature = torch.cat([feature_global.expand(-1, -1, n), feature], dim=1)
        feature = self.second_conv(feature)
        return torch.max(feature, dim=2)[0].reshape(bs, g, self.encoder_channel)


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = (
            self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # expect: MC515 pointmae
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), mask=mask)
        return x + self.mlp(self.norm2(x))


class TransformerEncoder(nn.Module):
    def __init__(self, embed_dim: int, depth: int, num_heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(depth))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x + pos, mask=mask)
        return x


class PointTransformer(nn.Module):
    def __init__(self, cfg: PointConfig) -> None:
        super().__init__()
        self.group_divider = Group(cfg.num_group, cfg.group_size)
        self.encoder = Encoder(cfg.encoder_dims)
        self.reduce_dim = nn.Linear(cfg.encoder_dims, cfg.trans_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.trans_dim))
        self.cls_pos = nn.Parameter(torch.randn(1, 1, cfg.trans_dim) * 0.02)
        self.pos_embed = nn.Sequential(nn.Linear(3, 128), nn.GELU(), nn.Linear(128, cfg.trans_dim))
        self.blocks = TransformerEncoder(cfg.trans_dim, cfg.depth, cfg.num_heads)
        self.norm = nn.LayerNorm(cfg.trans_dim)
        self.cls_head_finetune = nn.Sequential(
            nn.Linear(cfg.trans_dim * 2, 128),
            nn.LayerNorm(128),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(128, cfg.cls_dim),
        )

    def forward(self, pts: torch.Tensor, num_points: torch.Tensor) -> torch.Tensor:
        neighborhood, center, center_valid = self.group_divider(pts, num_points)
        group_input_tokens = self.reduce_dim(self.encoder(neighborhood))
        cls_tokens = self.cls_token.expand(group_input_tokens.size(0), -1, -1)
        cls_pos = self.cls_pos.expand(group_input_tokens.size(0), -1, -1)
        x = torch.cat((cls_tokens, group_input_tokens), dim=1)
        pos = torch.cat((cls_pos, self.pos_embed(center)), dim=1)
        token_keep = torch.cat(
            [center_valid.new_ones(center_valid.shape[0], 1), center_valid], dim=1
        )
        x = self.norm(self.blocks(x, pos, token_keep))
        group_max = x[:, 1:].masked_fill(~center_valid[..., None], float("-inf")).max(1)[0]
        return self.cls_head_finetune(torch.cat([x[:, 0], group_max], dim=-1))


SHAPES = ["sphere", "cube", "cylinder", "cone"]


def sample_shape(kind: int, n: int, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(n, 3, generator=gen)
    if kind == 0:
        p = torch.randn(n, 3, generator=gen)
        p = p / p.norm(dim=1, keepdim=True)
    elif kind == 1:
        p = u * 2 - 1
        face = torch.randint(0, 3, (n,), generator=gen)
        p[torch.arange(n), face] = torch.sign(p[torch.arange(n), face])
    else:
        theta, z = u[:, 0] * 2 * math.pi, u[:, 1] * 2 - 1
        r = torch.ones(n) if kind == 2 else (1 - z) / 2
        p = torch.stack([r * torch.cos(theta), r * torch.sin(theta), z], dim=1)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen))
    return p @ q + 0.02 * torch.randn(n, 3, generator=gen)


def make_batch(cfg: PointConfig, batch_size: int, gen: torch.Generator):
    labels = torch.randint(0, len(SHAPES), (batch_size,), generator=gen)
    num_points = torch.randint(cfg.min_points, cfg.max_points + 1, (batch_size,), generator=gen)
    pts = torch.zeros(batch_size, cfg.max_points, 3)
    for i in range(batch_size):
        pts[i, : num_points[i]] = sample_shape(int(labels[i]), int(num_points[i]), gen)
    return {"pts": pts, "num_points": num_points, "label": labels}


if __name__ == "__main__":
    torch.manual_seed(0)
    config = PointConfig()
    model = PointTransformer(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    gen = torch.Generator().manual_seed(0)
    for step in range(80):
        batch = make_batch(config, 16, gen)
        loss = F.cross_entropy(
            model(batch["pts"], batch["num_points"]), batch["label"], label_smoothing=0.1
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    test = make_batch(config, 16, gen)
    with torch.no_grad():
        logits = model(test["pts"], test["num_points"])
        print("accuracy", (logits.argmax(-1) == test["label"]).float().mean().item())
        i = int(test["num_points"].argmin())
        alone = model(test["pts"][i : i + 1], test["num_points"][i : i + 1])
    print("sparsest scan alone vs batched", (alone[0] - logits[i]).abs().max().item())
