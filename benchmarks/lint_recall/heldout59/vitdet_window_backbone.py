"""Plain-ViT detection backbone (ViTDet-style) with windowed attention and a few global blocks.

Images of a batch are padded to a common size, and the token grid is padded again up to a
multiple of the window. Window blocks add decomposed relative position biases and keep padded
tokens out of each window's keys; global blocks use SDPA with the image's valid-token mask.
Inference runs under autocast (float16 on CUDA, bfloat16 on CPU).

Source: NVIDIA/apex#1052, huggingface/lerobot PR #710 (conventions.md §3 items 18 and 19), conventions.md §2.3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def window_partition(x, ws):
    b, h, w, c = x.shape
    ph, pw = (ws - h % ws) % ws, (ws - w % ws) % ws
    x = F.pad(x, (0, 0, 0, pw, 0, ph))
    hp, wp = h + ph, w + pw
    x = x.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws, ws, c), (hp, wp)


def window_unpartition(windows, ws, pad_hw, hw):
    (hp, wp), (h, w) = pad_hw, hw
    b = windows.shape[0] // (hp * wp // ws // ws)
    x = windows.view(b, hp // ws, wp // ws, ws, ws, -1).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, hp, wp, -1)[:, :h, :w]


def get_rel_pos(size, rel_pos):
    coords = torch.arange(size, device=rel_pos.device)
    return rel_pos[coords[:, None] - coords[None, :] + size - 1]


def add_decomposed_rel_pos(attn, q, rel_pos_h, rel_pos_w, size):
    h, w = size
    b, heads, n, c = q.shape
    r_q = q.reshape(b, heads, h, w, c)
    rel_h = torch.einsum("bnhwc,hkc->bnhwk", r_q, get_rel_pos(h, rel_pos_h).to(q.dtype))
    rel_w = torch.einsum("bnhwc,wkc->bnhwk", r_q, get_rel_pos(w, rel_pos_w).to(q.dtype))
    attn = attn.view(b, heads, h, w, h, w) + rel_h[..., :, None] + rel_w[..., None, :]
    return attn.view(b, heads, n, n)


class Attention(nn.Module):
    def __init__(self, dim, heads, size):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * size[0] - 1, dim // heads))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * size[1] - 1, dim // heads))

    def forward(self, x, pad_keys=None):
        b, h, w, _ = x.shape
        q, k, v = self.qkv(x).view(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = add_decomposed_rel_pos(attn, q, self.rel_pos_h, self.rel_pos_w, (h, w))
        if pad_keys is not None:
            attn = attn.masked_fill(pad_keys[:, None, None, :], torch.finfo(torch.float32).min)  # expect: MC517 autocast
        y = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, h, w, -1)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads, window, grid):
        super().__init__()
        self.window, self.heads = window, heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, (window, window) if window else grid)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, valid):
        shortcut, x = x, self.norm1(x)
        h, w = x.shape[1:3]
        if self.window:
            windows, pad_hw = window_partition(x, self.window)
            valid_windows, _ = window_partition(valid[..., None].float(), self.window)
            x = self.attn(windows, pad_keys=valid_windows.flatten(1) == 0)
            x = window_unpartition(x, self.window, pad_hw, (h, w))
        else:
            b = x.shape[0]
            q, k, v = self.attn.qkv(x).view(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=valid.flatten(1)[:, None, None, :])
            x = self.attn.proj(y.transpose(1, 2).reshape(b, h, w, -1))
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class ViTDetBackbone(nn.Module):
    def __init__(self, patch=8, dim=64, heads=4, depth=4, window=4, global_blocks=(1, 3), grid=(8, 8)):
        super().__init__()
        self.patch = patch
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, grid[0], grid[1], dim))
        self.blocks = nn.ModuleList(Block(dim, heads, 0 if i in global_blocks else window, grid) for i in range(depth))
        self.neck = nn.Conv2d(dim, dim, 1)

    def forward(self, images, image_sizes):
        x = self.embed(images).permute(0, 2, 3, 1)
        gh, gw = x.shape[1:3]
        x = x + F.interpolate(self.pos.permute(0, 3, 1, 2), size=(gh, gw), mode="bicubic").permute(0, 2, 3, 1)
        ys, xs = torch.arange(gh, device=x.device), torch.arange(gw, device=x.device)
        rows = (image_sizes[:, 0, None] + self.patch - 1) // self.patch
        cols = (image_sizes[:, 1, None] + self.patch - 1) // self.patch
        valid = (ys[None, :, None] < rows[:, :, None]) & (xs[None, None, :] < cols[:, :, None])
        for block in self.blocks:
            x = block(x, valid)
        return self.neck(x.permute(0, 3, 1, 2))


def batch_images(images, size_divisibility=32):
    h = max(im.shape[1] for im in images)
    w = max(im.shape[2] for im in images)
    h, w = -(-h // size_divisibility) * size_divisibility, -(-w // size_divisibility) * size_divisibility
    batch = torch.zeros(len(images), 3, h, w)
    for i, im in enumerate(images):
        batch[i, :, : im.shape[1], : im.shape[2]] = im
    return batch, torch.tensor([[im.shape[1], im.shape[2]] for im in images])


@torch.no_grad()
def extract_features(backbone, images):
    batch, sizes = batch_images(images)
    device = next(backbone.parameters()).device
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    with torch.autocast(device.type, dtype=dtype):
        return backbone(batch.to(device), sizes.to(device))
