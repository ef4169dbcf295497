"""Pangu-Weather style 3D Earth-specific transformer for a one-step forecast.

Written after the Pangu-Weather pseudocode (198808xc/Pangu-Weather, pseudocode.py:
PatchEmbedding of upper-air and surface fields, EarthSpecificLayer, EarthSpecificBlock
with a roll on every other block, EarthAttention3D with an Earth-specific bias per
window type and ``_construct_index``, ``gen_mask``, PatchRecovery, the L1 loss with the
surface weighted by 0.25). Windows wrap around in longitude; pressure levels and
latitude do not.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, conventions.md §1 (direction cheat-sheet).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def window_partition(x, window_size):
    B, Z, H, W, C = x.shape
    wz, wh, ww = window_size
    x = x.view(B, Z // wz, wz, H // wh, wh, W // ww, ww, C).permute(0, 5, 1, 3, 2, 4, 6, 7)
    return x.reshape(B * (W // ww), (Z // wz) * (H // wh), wz * wh * ww, C)


def window_reverse(windows, window_size, B, Z, H, W):
    wz, wh, ww = window_size
    x = windows.view(B, W // ww, Z // wz, H // wh, wz, wh, ww, -1).permute(0, 2, 4, 3, 5, 1, 6, 7)
    return x.reshape(B, Z, H, W, -1)


def gen_mask(input_shape, window_size, shift_size):
    Z, H, W = input_shape
    img_mask = torch.zeros(1, Z, H, W, 1)
    cnt = 0
    for z in (slice(0, -window_size[0]), slice(-window_size[0], -shift_size[0]), slice(-shift_size[0], None)):
        for h in (slice(0, -window_size[1]), slice(-window_size[1], -shift_size[1]), slice(-shift_size[1], None)):
            img_mask[:, z, h, :, :] = cnt
            cnt += 1
    mask_windows = window_partition(img_mask, window_size)[0, :, :, 0]
    attn_mask = mask_windows[:, None, :] - mask_windows[:, :, None]
    return attn_mask.masked_fill(attn_mask != 0, float("-inf")).masked_fill(attn_mask == 0, 0.0)


class Mlp(nn.Module):
    def __init__(self, dim, ratio=4):
        super().__init__()
        self.linear1 = nn.Linear(dim, dim * ratio)
        self.linear2 = nn.Linear(dim * ratio, dim)

    def forward(self, x):
        return self.linear2(F.gelu(self.linear1(x)))


class EarthAttention3D(nn.Module):
    def __init__(self, dim, heads, window_size, input_shape):
        super().__init__()
        self.linear1 = nn.Linear(dim, dim * 3)
        self.linear2 = nn.Linear(dim, dim)
        self.head_number, self.dim = heads, dim
        self.scale = (dim // heads) ** -0.5
        self.window_size = window_size
        self.type_of_windows = (input_shape[0] // window_size[0]) * (input_shape[1] // window_size[1])
        wz, wh, ww = window_size
        self.earth_specific_bias = nn.Parameter(torch.zeros((2 * ww - 1) * wh * wh * wz * wz, self.type_of_windows, heads))
        nn.init.trunc_normal_(self.earth_specific_bias, std=0.02)
        self.register_buffer("position_index", self._construct_index(), persistent=False)

    def _construct_index(self):
        wz, wh, ww = self.window_size
        coords_1 = torch.stack(torch.meshgrid(torch.arange(wz), torch.arange(wh), torch.arange(ww), indexing="ij")).flatten(1)
        coords_2 = torch.stack(torch.meshgrid(-torch.arange(wz) * wz, -torch.arange(wh) * wh, torch.arange(ww), indexing="ij")).flatten(1)
        coords = (coords_1[:, :, None] - coords_2[:, None, :]).permute(1, 2, 0).contiguous()
        coords[:, :, 2] += ww - 1
        coords[:, :, 1] *= 2 * ww - 1
        coords[:, :, 0] *= (2 * ww - 1) * wh * wh
        return coords.sum(-1).flatten()

    def forward(self, x, mask=None):
        B_, nW, N, C = x.shape
        qkv = self.linear1(x).reshape(B_, nW, N, 3, self.head_number, C // self.head_number).permute(3, 0, 1, 4, 2, 5)
        query, key, value = qkv[0], qkv[1], qkv[2]
        attention = (query * self.scale) @ key.transpose(-2, -1)
        bias = self.earth_specific_bias[self.position_index].view(N, N, self.type_of_windows, self.head_number)
        attention = attention + bias.permute(2, 3, 0, 1).unsqueeze(0)
        if mask is not None:
            attention = attention * mask[None, :, None]  # expect: MC523 pangu
        attention = attention.softmax(dim=-1)
        x = (attention @ value).transpose(2, 3).reshape(B_, nW, N, C)
        return self.linear2(x)


class EarthSpecificBlock(nn.Module):
    def __init__(self, dim, heads, window_size, input_shape, roll):
        super().__init__()
        self.window_size, self.roll = window_size, roll
        self.shift_size = tuple(w // 2 for w in window_size)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = EarthAttention3D(dim, heads, window_size, input_shape)
        self.mlp = Mlp(dim)
        self.register_buffer("attn_mask", gen_mask(input_shape, window_size, self.shift_size) if roll else None, persistent=False)

    def forward(self, x):
        B, Z, H, W, C = x.shape
        shortcut = x
        x = self.norm1(x)
        if self.roll:
            x = torch.roll(x, shifts=tuple(-s for s in self.shift_size), dims=(1, 2, 3))
        windows = self.attention(window_partition(x, self.window_size), mask=self.attn_mask)
        x = window_reverse(windows, self.window_size, B, Z, H, W)
        if self.roll:
            x = torch.roll(x, shifts=self.shift_size, dims=(1, 2, 3))
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class EarthSpecificLayer(nn.Module):
    def __init__(self, depth, dim, heads, window_size, input_shape):
        super().__init__()
        self.blocks = nn.ModuleList(EarthSpecificBlock(dim, heads, window_size, input_shape, roll=i % 2 == 1) for i in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@dataclass
class PanguConfig:
    upper_vars: int = 5
    surface_vars: int = 4
    levels: int = 6
    lat: int = 32
    lon: int = 64
    patch_size: tuple = (2, 4, 4)
    dim: int = 32
    heads: int = 4
    depth: int = 2
    window_size: tuple = (2, 2, 4)


class PanguModel(nn.Module):
    def __init__(self, cfg: PanguConfig):
        super().__init__()
        self.cfg = cfg
        pz, ph, pw = cfg.patch_size
        self.upper_embed = nn.Conv3d(cfg.upper_vars, cfg.dim, cfg.patch_size, stride=cfg.patch_size)
        self.surface_embed = nn.Conv2d(cfg.surface_vars, cfg.dim, (ph, pw), stride=(ph, pw))
        self.input_shape = (cfg.levels // pz + 1, cfg.lat // ph, cfg.lon // pw)
        self.layer = EarthSpecificLayer(cfg.depth, cfg.dim, cfg.heads, cfg.window_size, self.input_shape)
        self.upper_recovery = nn.ConvTranspose3d(cfg.dim, cfg.upper_vars, cfg.patch_size, stride=cfg.patch_size)
        self.surface_recovery = nn.ConvTranspose2d(cfg.dim, cfg.surface_vars, (ph, pw), stride=(ph, pw))

    def forward(self, input_upper, input_surface):
        upper = self.upper_embed(input_upper)
        surface = self.surface_embed(input_surface).unsqueeze(2)
        x = torch.cat([surface, upper], dim=2).permute(0, 2, 3, 4, 1)
        x = self.layer(x).permute(0, 4, 1, 2, 3)
        output_surface = self.surface_recovery(x[:, :, 0]) + input_surface
        output_upper = self.upper_recovery(x[:, :, 1:]) + input_upper
        return output_upper, output_surface


def synthetic_fields(cfg, batch, generator):
    upper = F.interpolate(torch.randn(batch, cfg.upper_vars, cfg.levels, 8, 16, generator=generator), size=(cfg.levels, cfg.lat, cfg.lon), mode="trilinear")
    surface = F.interpolate(torch.randn(batch, cfg.surface_vars, 8, 16, generator=generator), size=(cfg.lat, cfg.lon), mode="bilinear")
    return upper, surface


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = PanguConfig()
    model = PanguModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=3e-6)
    for step in range(15):
        upper, surface = synthetic_fields(cfg, 2, g)
        target_upper, target_surface = torch.roll(upper, 2, dims=-1), torch.roll(surface, 2, dims=-1)
        output_upper, output_surface = model(upper, surface)
        loss = F.l1_loss(output_upper, target_upper) + 0.25 * F.l1_loss(output_surface, target_surface)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0:
            print(f"step {step} L1 loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        upper, surface = synthetic_fields(cfg, 1, g)
        out_upper, _ = model(upper, surface)
        shifted, _ = model(torch.roll(upper, 16, dims=-1), torch.roll(surface, 16, dims=-1))
        print("forecast NaN:", out_upper.isnan().any().item(),
              "| longitude equivariance:", (torch.roll(out_upper, 16, dims=-1) - shifted).abs().max().item())
