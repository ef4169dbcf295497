"""Swin-style window attention classifier ported from PaddleClas to PyTorch.

The Paddle code partitions the (B, H, W, C) patch grid into windows, adds a relative position
bias gathered with a registered `relative_position_index`, builds the shifted-window mask in
`__init__` from region ids (`img_mask`, `mask_windows`, fill -100.0) and keeps it as a buffer;
this port also accepts images smaller than the input resolution, padded at the bottom and right
(`valid_hw`). `paddle.roll`, `reshape` and `transpose(perm=...)` became their torch forms.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 张量共享内存风险).
"""
import copy

import torch
import torch.nn as nn


def window_partition(x, window_size):
    b, h, w, c = x.shape
    x = x.reshape(b, h // window_size, window_size, w // window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window_size * window_size, c)


def window_reverse(windows, window_size, h, w):
    b = windows.shape[0] // ((h // window_size) * (w // window_size))
    x = windows.reshape(b, h // window_size, w // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, -1)


class SwinBlock(nn.Module):
    def __init__(self, dim, resolution, num_heads, window_size, shift_size):
        super().__init__()
        self.resolution, self.window_size, self.shift_size = resolution, window_size, shift_size
        self.num_heads = num_heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window_size - 1) ** 2, num_heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window_size - 1
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * window_size - 1) + rel[..., 1])
        h = w = resolution
        img_mask = torch.zeros(1, h, w, 1)
        cnt = 0
        for hs in (slice(0, -window_size), slice(-window_size, -shift_size), slice(-shift_size, None)):
            for ws in (slice(0, -window_size), slice(-window_size, -shift_size), slice(-shift_size, None)):
                img_mask[:, hs, ws, :] = cnt
                cnt += 1
        mask_windows = window_partition(img_mask, window_size).squeeze(-1)
        attn_mask = mask_windows[:, None, :] - mask_windows[:, :, None]
        attn_mask = attn_mask.masked_fill(attn_mask != 0, -100.0)
        if shift_size == 0:
            attn_mask = torch.zeros_like(attn_mask)
        self.register_buffer("attn_mask", attn_mask)

    def forward(self, x, valid_hw):
        b, length, c = x.shape
        h = w = self.resolution
        valid = (torch.arange(h)[:, None] < valid_hw[0]) & (torch.arange(w)[None, :] < valid_hw[1])
        shifts = (-self.shift_size, -self.shift_size)
        shifted = torch.roll(self.norm(x).reshape(b, h, w, c), shifts=shifts, dims=(1, 2))
        valid_windows = window_partition(torch.roll(valid, shifts=shifts, dims=(0, 1))[None, ..., None], self.window_size)[..., 0]
        attn_mask = self.attn_mask.masked_fill_(~valid_windows[:, None, :], torch.finfo(x.dtype).min)  # expect: MC524 swinbuffer
        windows = window_partition(shifted, self.window_size)
        nw, n = attn_mask.shape[0], windows.shape[1]
        q, k, v = self.qkv(windows).reshape(-1, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = q @ k.transpose(-2, -1) * (c // self.num_heads) ** -0.5
        bias = self.relative_position_bias_table[self.relative_position_index.reshape(-1)].reshape(n, n, -1)
        attn = attn + bias.permute(2, 0, 1)[None]
        attn = attn.reshape(b, nw, self.num_heads, n, n) + attn_mask[None, :, None]
        out = (attn.softmax(-1).reshape(-1, self.num_heads, n, n) @ v).transpose(1, 2).reshape(-1, n, c)
        out = window_reverse(self.proj(out), self.window_size, h, w)
        out = torch.roll(out, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        return x + out.reshape(b, length, c)


class SwinClassifier(nn.Module):
    def __init__(self, in_chans=3, dim=16, resolution=8, patch=2, num_heads=2, window_size=4, num_classes=4):
        super().__init__()
        self.patch = patch
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.blocks = nn.ModuleList([SwinBlock(dim, resolution, num_heads, window_size, s) for s in (0, window_size // 2)])
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images, image_hw):
        valid_hw = (image_hw[0] // self.patch, image_hw[1] // self.patch)
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        for block in self.blocks:
            x = block(x, valid_hw)
        res = self.blocks[0].resolution
        keep = ((torch.arange(res)[:, None] < valid_hw[0]) & (torch.arange(res)[None, :] < valid_hw[1])).reshape(1, -1, 1)
        return self.head((x * keep).sum(1) / keep.sum(1))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SwinClassifier().eval()
    fresh = copy.deepcopy(model)
    small = torch.zeros(2, 3, 16, 16)
    small[:, :, :12, :12] = torch.randn(2, 3, 12, 12)
    full = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        model(small, (12, 12))
        after_small = model(full, (16, 16))
        reference = fresh(full, (16, 16))
    changed = sum(int((a != b).sum()) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    print("full-size logits after a padded batch vs a fresh model:", (after_small - reference).abs().max().item())
    print("state_dict entries changed by inference:", changed)
