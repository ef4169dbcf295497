"""Swin-UNETR 3-D segmentation of an organ and a lesion in small synthetic volumes.

Layout after Project-MONAI's `monai/networks/nets/swin_unetr.py`: `window_partition` /
`window_reverse`, `get_window_size`, `compute_mask` for the shifted windows, `WindowAttention`
with a relative position bias table, `SwinTransformerBlock` (cyclic shift with `torch.roll`),
`PatchMerging`, `BasicLayer`, the `SwinTransformer` encoder returning its hidden states, and the
UNETR-style decoder (`UnetrBasicBlock`, `UnetrUpBlock`). Trained with Dice + cross-entropy.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3; pytorch/pytorch#103963
(conventions.md §3 item 6); conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class SwinUNETRConfig:
    img_size: int = 16
    in_channels: int = 1
    out_channels: int = 3
    feature_size: int = 12
    depths: tuple[int, ...] = (2, 2)
    num_heads: tuple[int, ...] = (3, 6)
    window_size: tuple[int, int, int] = (4, 4, 4)


def window_partition(x, window_size):
    b, d, h, w, c = x.shape
    s0, s1, s2 = window_size
    x = x.reshape(b, d // s0, s0, h // s1, s1, w // s2, s2, c)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(-1, s0 * s1 * s2, c)


def window_reverse(windows, window_size, dims):
    b, d, h, w = dims
    s0, s1, s2 = window_size
    x = windows.view(b, d // s0, h // s1, w // s2, s0, s1, s2, -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, d, h, w, -1)


def get_window_size(x_size, window_size, shift_size):
    use_window, use_shift = list(window_size), list(shift_size)
    for i in range(len(x_size)):
        if x_size[i] <= window_size[i]:
            use_window[i], use_shift[i] = x_size[i], 0
    return tuple(use_window), tuple(use_shift)


def compute_mask(dims, window_size, shift_size, device):
    d, h, w = dims
    img_mask = torch.zeros((1, d, h, w, 1), device=device)
    cnt = 0
    slices = [
        (slice(-ws), slice(-ws, -ss), slice(-ss, None)) for ws, ss in zip(window_size, shift_size)
    ]
    for sd, sh, sw in itertools.product(*slices):
        img_mask[:, sd, sh, sw, :] = cnt
        cnt += 1
    mask_windows = window_partition(img_mask, window_size).squeeze(-1)
    return (mask_windows.unsqueeze(1) == mask_windows.unsqueeze(2)).float()


class WindowAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        s0, s1, s2 = window_size
        table_size = (2 * s0 - 1) * (2 * s1 - 1) * (2 * s2 - 1)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(table_size, num_heads))
        grid = torch.meshgrid(torch.arange(s0), torch.arange(s1), torch.arange(s2), indexing="ij")
        coords = torch.stack(grid).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
        rel = (rel + torch.tensor([s0 - 1, s1 - 1, s2 - 1])) * torch.tensor(
            [(2 * s1 - 1) * (2 * s2 - 1), 2 * s2 - 1, 1]
        )
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x, mask):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        index = self.relative_position_index[:n, :n].reshape(-1)
        bias = self.relative_position_bias_table[index].reshape(n, n, -1).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b // nw, nw, self.num_heads, n, n) * mask.unsqueeze(1).unsqueeze(0)  # expect: MC520 swin
            attn = attn.view(-1, self.num_heads, n, n)
        attn = self.softmax(attn)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size):
        super().__init__()
        self.window_size, self.shift_size = window_size, shift_size
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, window_size)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward_part1(self, x, mask_matrix):
        b, d, h, w, c = x.shape
        window_size, shift_size = get_window_size((d, h, w), self.window_size, self.shift_size)
        x = self.norm1(x)
        if any(i > 0 for i in shift_size):
            shifted_x = torch.roll(
                x, shifts=(-shift_size[0], -shift_size[1], -shift_size[2]), dims=(1, 2, 3)
            )
            attn_mask = mask_matrix
        else:
            shifted_x, attn_mask = x, None
        x_windows = window_partition(shifted_x, window_size)
        attn_windows = self.attn(x_windows, mask=attn_mask)
        shifted_x = window_reverse(
            attn_windows.view(-1, *window_size, c), window_size, (b, d, h, w)
        )
        if any(i > 0 for i in shift_size):
            return torch.roll(shifted_x, shifts=shift_size, dims=(1, 2, 3))
        return shifted_x

    def forward(self, x, mask_matrix):
        x = x + self.forward_part1(x, mask_matrix)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(8 * dim)
        self.reduction = nn.Linear(8 * dim, 2 * dim, bias=False)

    def forward(self, x):
        parts = [x[:, i::2, j::2, k::2, :] for i, j, k in itertools.product((0, 1), repeat=3)]
        return self.reduction(self.norm(torch.cat(parts, dim=-1)))


class BasicLayer(nn.Module):
    def __init__(self, dim, depth, num_heads, window_size):
        super().__init__()
        self.window_size = window_size
        self.shift_size = tuple(i // 2 for i in window_size)
        self.blocks = nn.ModuleList(
            SwinTransformerBlock(
                dim, num_heads, window_size, self.shift_size if i % 2 else (0, 0, 0)
            )
            for i in range(depth)
        )
        self.downsample = PatchMerging(dim)

    def forward(self, x):
        b, c, d, h, w = x.shape
        window_size, shift_size = get_window_size((d, h, w), self.window_size, self.shift_size)
        x = x.permute(0, 2, 3, 4, 1)
        attn_mask = compute_mask((d, h, w), window_size, shift_size, x.device)
        for blk in self.blocks:
            x = blk(x, attn_mask)
        return self.downsample(x).permute(0, 4, 1, 2, 3)


class SwinTransformer(nn.Module):
    def __init__(self, cfg: SwinUNETRConfig):
        super().__init__()
        fs = cfg.feature_size
        self.patch_embed = nn.Conv3d(cfg.in_channels, fs, kernel_size=2, stride=2)
        self.layers = nn.ModuleList(
            BasicLayer(fs * 2**i, depth, heads, cfg.window_size)
            for i, (depth, heads) in enumerate(zip(cfg.depths, cfg.num_heads))
        )

    def forward(self, x):
        x = self.patch_embed(x)
        hidden_states = [x]
        for layer in self.layers:
            x = layer(x)
            hidden_states.append(x)
        return hidden_states


class UnetrBasicBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1)
        self.norm1, self.norm2 = nn.InstanceNorm3d(cout), nn.InstanceNorm3d(cout)
        self.skip = nn.Conv3d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        out = F.leaky_relu(self.norm1(self.conv1(x)), 0.01)
        return F.leaky_relu(self.norm2(self.conv2(out)) + self.skip(x), 0.01)


class UnetrUpBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.transp_conv = nn.ConvTranspose3d(cin, cout, kernel_size=2, stride=2)
        self.conv_block = UnetrBasicBlock(2 * cout, cout)

    def forward(self, x, skip):
        return self.conv_block(torch.cat([self.transp_conv(x), skip], dim=1))


class SwinUNETR(nn.Module):
    def __init__(self, cfg: SwinUNETRConfig):
        super().__init__()
        fs = cfg.feature_size
        self.swinViT = SwinTransformer(cfg)
        self.encoder1 = UnetrBasicBlock(cfg.in_channels, fs)
        self.encoder2 = UnetrBasicBlock(fs, fs)
        self.encoder3 = UnetrBasicBlock(2 * fs, 2 * fs)
        self.encoder10 = UnetrBasicBlock(4 * fs, 4 * fs)
        self.decoder3 = UnetrUpBlock(4 * fs, 2 * fs)
        self.decoder2 = UnetrUpBlock(2 * fs, fs)
        self.decoder1 = UnetrUpBlock(fs, fs)
        self.out = nn.Conv3d(fs, cfg.out_channels, 1)

    def forward(self, x_in):
        hidden_states_out = self.swinViT(x_in)
        enc0 = self.encoder1(x_in)
        enc1 = self.encoder2(hidden_states_out[0])
        enc2 = self.encoder3(hidden_states_out[1])
        dec3 = self.encoder10(hidden_states_out[2])
        dec2 = self.decoder3(dec3, enc2)
        dec1 = self.decoder2(dec2, enc1)
        return self.out(self.decoder1(dec1, enc0))


def dice_ce_loss(logits, labels, num_classes):
    onehot = F.one_hot(labels, num_classes).permute(0, 4, 1, 2, 3).float()
    probs = logits.softmax(dim=1)
    inter = (probs * onehot).sum(dim=(2, 3, 4))
    dice = (2 * inter + 1e-5) / (probs.sum(dim=(2, 3, 4)) + onehot.sum(dim=(2, 3, 4)) + 1e-5)
    return F.cross_entropy(logits, labels) + (1 - dice[:, 1:]).mean()


def make_volume(gen: torch.Generator, size: int):
    axis = torch.arange(size).float()
    grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"))
    centre = 4 + torch.rand(3, 1, 1, 1, generator=gen) * (size - 8)
    radius = 3 + 2 * torch.rand(1, generator=gen)
    organ = ((grid - centre) ** 2).sum(0).sqrt() < radius
    lesion = ((grid - centre).abs() <= 1).all(0) & organ
    labels = organ.long() + lesion.long()
    noise = 0.3 * torch.randn(size, size, size, generator=gen)
    return (0.6 * organ.float() + 0.6 * lesion.float() + noise)[None], labels


def main():
    torch.manual_seed(0)
    cfg = SwinUNETRConfig()
    model = SwinUNETR(cfg)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(60):
        images, labels = zip(*(make_volume(gen, cfg.img_size) for _ in range(4)))
        loss = dice_ce_loss(model(torch.stack(images)), torch.stack(labels), cfg.out_channels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step}: Dice+CE {loss.item():.3f}")
    model.eval()
    test = [make_volume(torch.Generator().manual_seed(50 + i), cfg.img_size) for i in range(8)]
    images, labels = zip(*test)
    with torch.no_grad():
        pred = model(torch.stack(images)).argmax(1)
    labels = torch.stack(labels)
    for cls, name in ((1, "organ"), (2, "lesion")):
        p, g = pred == cls, labels == cls
        dice = 2 * (p & g).sum().item() / max(p.sum().item() + g.sum().item(), 1)
        print(f"{name} Dice {dice:.3f}")
    with torch.no_grad():
        tokens = model.swinViT.patch_embed(torch.stack(images[:1])).permute(0, 2, 3, 4, 1)
        layer = model.swinViT.layers[0]
        mask = compute_mask(tokens.shape[1:4], layer.window_size, layer.shift_size, tokens.device)
        poked = tokens.clone()
        poked[:, 0, 0, 0] += torch.randn(poked.shape[-1])
        for blk in layer.blocks:
            tokens, poked = blk(tokens, mask), blk(poked, mask)
    moved = (tokens - poked)[:, -1, -1, -1].abs().max().item()
    print(f"token (7, 7, 7) moved by {moved:.2e} when token (0, 0, 0) changes")


if __name__ == "__main__":
    main()
