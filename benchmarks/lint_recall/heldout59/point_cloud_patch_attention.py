"""3-D point-cloud semantic segmentation with serialized patch attention (Point Transformer V3-style).

Points of several LiDAR scans are packed into one sequence with an `offset` tensor (cumulative
point counts). Each scan is serialized along a z-order curve and cut into patches of
`patch_size` points; attention stays inside a patch. FlashAttention varlen takes the patch
boundaries as cu_seqlens, xformers a BlockDiagonalMask from the patch lengths, and the reference
path a dense patch mask.

Source: seed masked_fill_inplace.txt (非原地操作: masked_fill returns a new tensor; 区别); conventions.md §1 (varlen row, xformers row)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_varlen_qkvpacked_func
except ImportError:
    flash_attn_varlen_qkvpacked_func = None
try:
    from xformers.ops import fmha
except ImportError:
    fmha = None


def offset_to_batch(offset):
    counts = torch.diff(offset, prepend=offset.new_zeros(1))
    return torch.repeat_interleave(torch.arange(len(counts), device=offset.device), counts)


def z_order(grid):
    code = torch.zeros(grid.shape[0], dtype=torch.long, device=grid.device)
    for bit in range(10):
        for axis in range(3):
            code |= ((grid[:, axis] >> bit) & 1) << (3 * bit + axis)
    return code


def serialize(coord, offset, grid_size=0.05):
    batch = offset_to_batch(offset)
    index = batch[:, None].expand(-1, 3)
    scan_min = coord.new_zeros(len(offset), 3).scatter_reduce(0, index, coord, "amin", include_self=False)
    grid = ((coord - scan_min[batch]) / grid_size).long().clamp(0, 1023)
    order = torch.argsort(z_order(grid) + (batch << 32))
    return order, torch.argsort(order), batch[order]


def patch_layout(batch_sorted, patch_size):
    counts = torch.bincount(batch_sorted)
    starts = F.pad(counts.cumsum(0), (1, 0))[:-1]
    local = torch.arange(len(batch_sorted), device=batch_sorted.device) - starts[batch_sorted]
    patches_per_scan = (counts + patch_size - 1) // patch_size
    first_patch = F.pad(patches_per_scan.cumsum(0), (1, 0))[:-1]
    patch_of = first_patch[batch_sorted] + local // patch_size
    lengths = torch.bincount(patch_of)
    cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    return patch_of, lengths, cu_seqlens


class SerializedAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, feat, layout):
        n, d = feat.shape
        qkv = self.qkv(feat).view(n, 3, self.heads, self.head_dim)
        if flash_attn_varlen_qkvpacked_func is not None and feat.is_cuda:
            cu, max_len = layout["cu_seqlens"], int(layout["lengths"].max())
            y = flash_attn_varlen_qkvpacked_func(qkv.half(), cu, max_len).to(feat.dtype)
        elif fmha is not None and feat.is_cuda:
            bias = fmha.BlockDiagonalMask.from_seqlens(layout["lengths"].tolist())
            q, k, v = qkv[None].unbind(2)
            y = fmha.memory_efficient_attention(q, k, v, attn_bias=bias)[0]
        else:
            q, k, v = qkv.permute(1, 2, 0, 3)
            same_patch = layout["patch_of"][:, None] == layout["patch_of"][None, :]
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            scores.masked_fill(~same_patch, float("-inf"))  # expect: MC525 varlen
            y = (scores.softmax(dim=-1) @ v).permute(1, 0, 2)
        return self.proj(y.reshape(n, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.cpe = nn.Sequential(nn.Linear(3, dim), nn.GELU(), nn.Linear(dim, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SerializedAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, feat, coord_sorted, layout):
        feat = feat + self.cpe(coord_sorted)
        feat = feat + self.attn(self.norm1(feat), layout)
        return feat + self.mlp(self.norm2(feat))


class PointSegmenter(nn.Module):
    def __init__(self, in_channels=4, classes=8, dim=48, heads=3, depth=2, patch_size=32):
        super().__init__()
        self.patch_size = patch_size
        self.stem = nn.Linear(in_channels, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, coord, feat, offset):
        order, inverse, batch_sorted = serialize(coord, offset)
        patch_of, lengths, cu_seqlens = patch_layout(batch_sorted, self.patch_size)
        layout = {"patch_of": patch_of, "lengths": lengths, "cu_seqlens": cu_seqlens}
        x = self.stem(feat[order])
        for block in self.blocks:
            x = block(x, coord[order], layout)
        return self.head(x)[inverse]


def collate_scans(scans):
    coord = torch.cat([s["coord"] for s in scans])
    feat = torch.cat([s["feat"] for s in scans])
    offset = torch.tensor([len(s["coord"]) for s in scans]).cumsum(0)
    label = torch.cat([s["label"] for s in scans])
    return coord, feat, offset, label


def synthetic_scan(n, classes=8):
    coord = torch.rand(n, 3) * torch.tensor([20.0, 20.0, 3.0])
    label = (coord[:, 2] * classes / 3).long().clamp(max=classes - 1)
    feat = torch.cat([coord[:, 2:] / 3, torch.rand(n, 3)], dim=1)
    return {"coord": coord, "feat": feat, "label": label}


def train(model, steps=30, lr=2e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        coord, feat, offset, label = collate_scans([synthetic_scan(300), synthetic_scan(200)])
        loss = F.cross_entropy(model(coord, feat, offset), label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def miou(model, scans, classes=8):
    coord, feat, offset, label = collate_scans(scans)
    pred = model(coord, feat, offset).argmax(-1)
    ious = [((pred == c) & (label == c)).sum() / ((pred == c) | (label == c)).sum().clamp_min(1) for c in range(classes)]
    return torch.stack(ious).float().mean().item()
