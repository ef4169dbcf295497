"""SatMAE-style group-channel ViT fine-tuned for land-cover classification of Sentinel-2 chips.

The ten bands are split into SatMAE's three spectral groups, each group gets its own patch
embedding, and every token carries a fixed 2-D sin-cos position embedding concatenated with a
learned channel-group embedding, as in sustainlab-group/SatMAE's
``models_vit_group_channels.py`` (``GroupChannelsVisionTransformer``, ``channel_embed``,
``channel_cls_embed``, ``get_2d_sincos_pos_embed``). The first ``num_group_local_blocks`` blocks
attend within a spectral group (plus the class token), the rest globally; the classifier reads
the mean of the patch tokens (``global_pool``) on EuroSAT-like chips.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask), conventions.md §2.3 and §1
(direction cheat-sheet)
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SENTINEL2_BANDS = ("B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12")
CHANNEL_GROUPS = ((0, 1, 2, 6), (3, 4, 5, 7), (8, 9))
EUROSAT_CLASSES = ("AnnualCrop", "Forest", "Residential", "River", "SeaLake")


@dataclass
class GroupViTConfig:
    img_size: int = 16
    patch_size: int = 4
    embed_dim: int = 64
    channel_embed: int = 16
    depth: int = 4
    num_heads: int = 4
    mlp_ratio: float = 2.0
    num_group_local_blocks: int = 2
    num_classes: int = len(EUROSAT_CLASSES)


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
    omega = 1.0 / 10000**omega
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False):
    grid_h, grid_w = np.meshgrid(np.arange(grid_size, dtype=np.float32), np.arange(grid_size))
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid_h)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid_w)
    pos_embed = np.concatenate([emb_h, emb_w], axis=1)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


def channel_group_bias(num_groups, num_patches, device=None):
    n = 1 + num_groups * num_patches
    group_ids = torch.arange(num_groups, device=device).repeat_interleave(num_patches)
    group_ids = torch.cat([group_ids.new_full((1,), -1), group_ids])
    bias = torch.zeros(n, n, device=device)
    for g in range(num_groups):
        start = 1 + g * num_patches
        bias[start : start + num_patches, start : start + num_patches] = 0.0
    bias[bias == 0] = float("-inf")  # expect: MC504 satmae
    bias[0, :] = 0.0
    bias[:, 0] = 0.0
    return bias


class PatchEmbed(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_bias=None):
        B, N, C = x.shape
        qkv = (
            self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if attn_bias is not None:
            attn = attn + attn_bias
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x, attn_bias=None):
        x = x + self.attn(self.norm1(x), attn_bias)
        return x + self.mlp(self.norm2(x))


class GroupChannelsVisionTransformer(nn.Module):
    def __init__(self, cfg: GroupViTConfig, channel_groups=CHANNEL_GROUPS):
        super().__init__()
        self.cfg = cfg
        self.channel_groups = channel_groups
        self.patch_embed = nn.ModuleList(
            [
                PatchEmbed(cfg.img_size, cfg.patch_size, len(g), cfg.embed_dim)
                for g in channel_groups
            ]
        )
        num_patches = self.patch_embed[0].num_patches
        pos_dim = cfg.embed_dim - cfg.channel_embed
        pos = get_2d_sincos_pos_embed(pos_dim, int(num_patches**0.5), cls_token=True)
        self.register_buffer("pos_embed", torch.from_numpy(pos).float().unsqueeze(0))
        self.channel_embed = nn.Parameter(torch.zeros(1, len(channel_groups), cfg.channel_embed))
        self.channel_cls_embed = nn.Parameter(torch.zeros(1, 1, cfg.channel_embed))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.blocks = nn.ModuleList(
            [Block(cfg.embed_dim, cfg.num_heads, cfg.mlp_ratio) for _ in range(cfg.depth)]
        )
        self.fc_norm = nn.LayerNorm(cfg.embed_dim, eps=1e-6)
        self.head = nn.Linear(cfg.embed_dim, cfg.num_classes)
        nn.init.normal_(self.channel_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=0.02)

    def forward_features(self, x):
        b = x.shape[0]
        x = torch.stack(
            [emb(x[:, list(g)]) for emb, g in zip(self.patch_embed, self.channel_groups)], 1
        )
        _, G, L, D = x.shape
        channel_embed = self.channel_embed.unsqueeze(2).expand(-1, -1, L, -1)
        pos_embed = self.pos_embed[:, 1:, :].unsqueeze(1).expand(-1, G, -1, -1)
        x = (x + torch.cat((pos_embed, channel_embed), dim=-1)).view(b, G * L, D)
        cls_pos_channel = torch.cat((self.pos_embed[:, :1, :], self.channel_cls_embed), dim=-1)
        x = torch.cat((cls_pos_channel + self.cls_token.expand(b, -1, -1), x), dim=1)
        attn_bias = channel_group_bias(G, L, device=x.device)
        for i, blk in enumerate(self.blocks):
            x = blk(x, attn_bias if i < self.cfg.num_group_local_blocks else None)
        return self.fc_norm(x[:, 1:, :].mean(dim=1))

    def forward(self, x):
        return self.head(self.forward_features(x))


def make_eurosat_like(n, cfg, signatures, gen):
    labels = torch.randint(0, len(EUROSAT_CLASSES), (n,), generator=gen)
    texture = torch.randn(n, 1, cfg.img_size, cfg.img_size, generator=gen)
    texture = F.avg_pool2d(texture, 3, stride=1, padding=1)
    shift = torch.randint(0, len(EUROSAT_CLASSES), (n,), generator=gen)
    mix = (texture > 0).float()
    images = signatures[labels][:, :, None, None] * (1 - 0.5 * mix)
    images = images + 0.5 * mix * signatures[shift][:, :, None, None]
    images = images + 0.05 * torch.randn(images.shape, generator=gen)
    return (images - 0.5) / 0.3, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = GroupViTConfig()
    gen = torch.Generator().manual_seed(0)
    signatures = torch.rand(len(EUROSAT_CLASSES), len(SENTINEL2_BANDS), generator=gen)
    x_train, y_train = make_eurosat_like(1024, cfg, signatures, gen)
    x_test, y_test = make_eurosat_like(256, cfg, signatures, gen)
    model = GroupChannelsVisionTransformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    for epoch in range(3):
        perm = torch.randperm(1024)
        for start in range(0, 1024, 64):
            idx = perm[start : start + 64]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx], label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        acc = (model(x_test).argmax(-1) == y_test).float().mean().item()
    visible = torch.isfinite(channel_group_bias(len(CHANNEL_GROUPS), 16)).sum().item()
    print(f"top-1 {acc:.3f}, visible pairs in the group-local bias {visible}")
