"""Vision Transformer image tower with per-image token dropping (FLIP / PatchDropout, MAE's
``random_masking`` with ``argsort`` of noise) for images of different sizes pasted on a fixed
canvas: each image keeps a fraction of its own valid patches, the kept tokens are gathered and
right-padded to the longest, the encoder runs on ``F.scaled_dot_product_attention``, and the
output is mean-pooled over the kept tokens into a normalised embedding for a CLIP-style loss.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3 item 21 and §1 (SDPA row)
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ViTConfig:
    canvas: int = 32
    patch_size: int = 8
    embed_dim: int = 32
    num_heads: int = 4
    depth: int = 2
    keep_ratio: float = 0.5
    out_dim: int = 16


def patchify(imgs, p):
    B, C, H, W = imgs.shape
    x = imgs.reshape(B, C, H // p, p, W // p, p)
    return torch.einsum("nchpwq->nhwpqc", x).reshape(B, (H // p) * (W // p), p * p * C)


def valid_patches(image_sizes, canvas, p):
    grid = torch.arange(canvas // p)
    rows = grid[None, :] < torch.div(image_sizes[:, 0] + p - 1, p, rounding_mode="floor")[:, None]
    cols = grid[None, :] < torch.div(image_sizes[:, 1] + p - 1, p, rounding_mode="floor")[:, None]
    return (rows[:, :, None] & cols[:, None, :]).flatten(1)


def random_masking(x, valid, keep_ratio, noise=None):
    B, L, D = x.shape
    len_keep = torch.clamp((valid.sum(1).float() * keep_ratio).long(), min=1)
    noise = torch.rand(B, L, device=x.device) if noise is None else noise
    ids_shuffle = torch.argsort(noise.masked_fill(~valid, 2.0), dim=1)
    ids_keep = ids_shuffle[:, : int(len_keep.max())]
    x_kept = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, D))
    token_keep = torch.arange(ids_keep.shape[1], device=x.device)[None, :] < len_keep[:, None]
    return x_kept, token_keep, ids_keep


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attn_mask):
        B, N, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(h.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class ImageTower(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.cfg = cfg
        num_patches = (cfg.canvas // cfg.patch_size) ** 2
        self.patch_embed = nn.Linear(3 * cfg.patch_size ** 2, cfg.embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, cfg.embed_dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.embed_dim, cfg.num_heads) for _ in range(cfg.depth))
        self.norm, self.proj = nn.LayerNorm(cfg.embed_dim), nn.Linear(cfg.embed_dim, cfg.out_dim, bias=False)

    def forward(self, imgs, image_sizes, noise=None):
        x = self.patch_embed(patchify(imgs, self.cfg.patch_size)) + self.pos_embed[:, 1:]
        valid = valid_patches(image_sizes, self.cfg.canvas, self.cfg.patch_size)
        keep_ratio = self.cfg.keep_ratio if self.training or noise is not None else 1.0
        x, token_keep, _ = random_masking(x, valid, keep_ratio, noise)
        cls = (self.cls_token + self.pos_embed[:, :1]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        keep = torch.cat([token_keep.new_ones(x.shape[0], 1), token_keep], dim=1)
        attn_mask = keep[:, None, None, :]
        for blk in self.blocks:
            x = blk(x, attn_mask)
        x = self.norm(x)
        pooled = (x * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
        return F.normalize(self.proj(pooled), dim=-1)


def clip_loss(image_emb, text_emb, logit_scale=math.log(1 / 0.07)):
    logits = logit_scale * image_emb @ text_emb.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


if __name__ == "__main__":
    torch.manual_seed(0)
    tower = ImageTower(ViTConfig()).eval()
    image_sizes = torch.tensor([[32, 32], [16, 24], [24, 8]])
    imgs = torch.zeros(3, 3, 32, 32)
    for i, (h, w) in enumerate(image_sizes.tolist()):
        imgs[i, :, :h, :w] = torch.randn(3, h, w)
    noise = torch.rand(3, 16)
    with torch.no_grad():
        emb = tower(imgs, image_sizes, noise)
        print("clip loss:", clip_loss(emb, F.normalize(torch.randn(3, 16), dim=-1)).item())
        for i in (1, 2):
            alone = tower(imgs[i:i + 1], image_sizes[i:i + 1], noise[i:i + 1])
            print(f"image {i} batched vs alone:", (emb[i] - alone[0]).abs().max().item())
