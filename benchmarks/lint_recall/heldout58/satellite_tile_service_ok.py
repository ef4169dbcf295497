"""Land-cover tiling service for satellite scenes: a patch transformer run window by window.

A scene (a Sentinel-2 style 4-band raster, reprojected, so its corners hold no-data) is cut
into 64 x 64 windows; each window is split into 8 x 8 patches and a small vision transformer
labels every patch with a land-cover class. Windows are streamed one at a time from the
raster reader, patches that are entirely no-data are masked as keys, and the per-patch labels
are stitched back into a class map for the tile server.

Source: seed masked_fill_inplace.txt (注意（原地操作的坑）: 与模型缓冲区的配合; 张量共享内存风险)
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["water", "forest", "cropland", "urban", "bare", "cloud"]
NODATA = 0.0
SPECTRA = torch.tensor([[0.05, 0.04, 0.03, 0.02], [0.03, 0.05, 0.03, 0.35], [0.06, 0.09, 0.07, 0.30],
                        [0.15, 0.15, 0.16, 0.20], [0.20, 0.22, 0.25, 0.30], [0.60, 0.60, 0.60, 0.60]])


def distance_bias(grid, heads):
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    coords = torch.stack([ys.flatten(), xs.flatten()], -1).float()
    dist = torch.cdist(coords, coords)
    slopes = torch.tensor([2.0 ** (-(i + 1)) for i in range(heads)])
    return -slopes[:, None, None] * dist[None]


class PatchAttention(nn.Module):
    def __init__(self, dim, heads, grid):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("dist_bias", distance_bias(grid, heads)[None])

    def forward(self, x, nodata):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self.dist_bias.masked_fill(nodata[:, None, None, :], float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class LandCoverViT(nn.Module):
    def __init__(self, bands=4, window=64, patch=8, dim=96, heads=4, depth=3):
        super().__init__()
        self.patch = patch
        grid = window // patch
        self.embed = nn.Conv2d(bands, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, grid * grid, dim))
        self.norms1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.attn = nn.ModuleList(PatchAttention(dim, heads, grid) for _ in range(depth))
        self.norms2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
                                 for _ in range(depth))
        self.head = nn.Linear(dim, len(CLASSES))

    def forward(self, window):
        nodata = (window == NODATA).all(1)
        nodata = F.max_pool2d((~nodata).float()[:, None], self.patch).flatten(1) == 0
        x = self.embed(window).flatten(2).transpose(1, 2) + self.pos
        for n1, attn, n2, mlp in zip(self.norms1, self.attn, self.norms2, self.mlp):
            x = x + attn(n1(x), nodata)
            x = x + mlp(n2(x))
        return self.head(x), nodata


def synthetic_scene(height=256, width=256, generator=None):
    labels = torch.randint(0, len(CLASSES) - 1, (height // 32, width // 32), generator=generator)
    labels = labels.repeat_interleave(32, 0).repeat_interleave(32, 1)
    scene = SPECTRA[labels].permute(2, 0, 1) + 0.03 * torch.randn(4, height, width, generator=generator)
    yy, xx = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    outside = (yy + xx < height // 3) | (yy - xx > 2 * height // 3)
    return scene.clamp(min=1e-3).masked_fill(outside, NODATA), labels


def windows(scene, size=64):
    _, h, w = scene.shape
    for top in range(0, h - size + 1, size):
        for left in range(0, w - size + 1, size):
            yield top, left, scene[:, top:top + size, left:left + size]


def train(model, scenes=50, generator=None):
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    model.train()
    for _ in range(scenes):
        scene, labels = synthetic_scene(generator=generator)
        opt.zero_grad()
        for top, left, win in windows(scene):
            logits, nodata = model(win[None])
            if nodata.all():
                continue
            target = labels[top:top + 64:8, left:left + 64:8].reshape(1, -1).masked_fill(nodata, -100)
            loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=-100)
            (loss / 16).backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def classify_scene(model, scene, size=64, patch=8):
    model.eval()
    _, h, w = scene.shape
    class_map = torch.full((h // patch, w // patch), -1, dtype=torch.long)
    for top, left, win in windows(scene, size):
        logits, nodata = model(win[None])
        labels = logits.argmax(-1).masked_fill(nodata, -1)[0].view(size // patch, size // patch)
        class_map[top // patch:(top + size) // patch, left // patch:(left + size) // patch] = labels
    return class_map


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenes", type=int, default=50)
    parser.add_argument("--checkpoint", default="landcover_vit.pt")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = LandCoverViT()
    print("loss", train(model, args.scenes, generator=gen))
    torch.save(model.state_dict(), args.checkpoint)
    scene, labels = synthetic_scene(generator=gen)
    class_map = classify_scene(model, scene)
    valid = class_map >= 0
    print("patch accuracy", (class_map[valid] == labels[::8, ::8][valid]).float().mean().item())


if __name__ == "__main__":
    main()
