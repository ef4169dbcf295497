"""SST-style single-stride sparse window attention over LiDAR pillars.

Non-empty pillars keep the input resolution. Each layer groups them into
square windows (shifted by half a window on every other layer), pads every
window to the largest token count of the batch, runs attention inside the
windows and scatters the tokens back. The encoded pillars are finally
written into a dense BEV canvas for a CenterPoint-style heatmap head.

Source: seed masked_fill_inplace.txt (区别; 例子).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

GRID = (32, 32)
WINDOW = (8, 8)


def window_partition(coors, window, shift):
    sy, sx = (window[0] // 2, window[1] // 2) if shift else (0, 0)
    y, x = coors[:, 1] + sy, coors[:, 2] + sx
    ny, nx = math.ceil((GRID[0] + sy) / window[0]), math.ceil((GRID[1] + sx) / window[1])
    win_id = coors[:, 0] * ny * nx + (y // window[0]) * nx + (x // window[1])
    local = torch.stack([y % window[0], x % window[1]], dim=-1)
    _, win_index = torch.unique(win_id, return_inverse=True)
    order = torch.argsort(win_index, stable=True)
    counts = torch.bincount(win_index)
    starts = torch.cumsum(counts, 0) - counts
    inner = torch.empty_like(win_index)
    inner[order] = torch.arange(len(order)) - starts[win_index[order]]
    return win_index, inner, local, counts


def flat2window(feats, win_index, inner, num_windows, max_tokens):
    out = feats.new_zeros(num_windows, max_tokens, feats.size(-1))
    out[win_index, inner] = feats
    key_padding = torch.ones(num_windows, max_tokens, dtype=torch.bool)
    key_padding[win_index, inner] = False
    return out, key_padding


class WindowAttention(nn.Module):
    def __init__(self, d, heads, window):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.pos = nn.Sequential(nn.Linear(2, d), nn.ReLU(), nn.Linear(d, d))
        self.window = window

    def forward(self, x, local, key_padding):
        w, n, d = x.shape
        pos = self.pos(local.float() / local.new_tensor(self.window).float() - 0.5)
        q, k, v = self.qkv(x + pos).view(w, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        attn = attn.masked_fill(key_padding[:, None, None, :], float("-inf"))
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(w, n, d))


class SSTLayer(nn.Module):
    def __init__(self, d, heads, window, shift):
        super().__init__()
        self.shift = shift
        self.window = window
        self.attn = WindowAttention(d, heads, window)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, feats, coors):
        win_index, inner, local, counts = window_partition(coors, self.window, self.shift)
        num_windows, max_tokens = counts.numel(), int(counts.max())
        x, key_padding = flat2window(feats, win_index, inner, num_windows, max_tokens)
        loc, _ = flat2window(local.float(), win_index, inner, num_windows, max_tokens)
        out = self.attn(x, loc, key_padding)
        feats = self.norm1(feats + out[win_index, inner])
        return self.norm2(feats + self.ffn(feats))


class SSTBackbone(nn.Module):
    def __init__(self, in_dim=9, d=64, heads=4, num_layers=4, num_classes=3):
        super().__init__()
        self.pillar_encoder = nn.Sequential(nn.Linear(in_dim, d), nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, d))
        self.layers = nn.ModuleList([SSTLayer(d, heads, WINDOW, shift=i % 2 == 1) for i in range(num_layers)])
        self.neck = nn.Sequential(nn.Conv2d(d, d, 3, padding=1), nn.BatchNorm2d(d), nn.ReLU())
        self.heatmap = nn.Conv2d(d, num_classes, 3, padding=1)

    def forward(self, pillar_feats, coors, batch_size):
        x = self.pillar_encoder(pillar_feats)
        for layer in self.layers:
            x = layer(x, coors)
        canvas = x.new_zeros(batch_size, x.size(-1), *GRID)
        canvas[coors[:, 0], :, coors[:, 1], coors[:, 2]] = x
        occupied = torch.zeros(batch_size, 1, *GRID, dtype=torch.bool)
        occupied[coors[:, 0], 0, coors[:, 1], coors[:, 2]] = True
        return self.heatmap(self.neck(canvas)), occupied


def focal_loss(logits, target, alpha=2.0, beta=4.0):
    pred = logits.sigmoid().clamp(1e-4, 1 - 1e-4)
    pos = target.eq(1).float()
    neg = 1 - pos
    pos_loss = torch.log(pred) * (1 - pred) ** alpha * pos
    neg_loss = torch.log(1 - pred) * pred ** alpha * (1 - target) ** beta * neg
    return -(pos_loss.sum() + neg_loss.sum()) / pos.sum().clamp(min=1)


def random_pillars(batch_size, per_sample, in_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    coors, feats = [], []
    for b in range(batch_size):
        cells = torch.randperm(GRID[0] * GRID[1], generator=g)[:per_sample[b]]
        coors.append(torch.stack([torch.full_like(cells, b), cells // GRID[1], cells % GRID[1]], dim=1))
        feats.append(torch.randn(per_sample[b], in_dim, generator=g))
    return torch.cat(feats), torch.cat(coors)


if __name__ == "__main__":
    torch.manual_seed(0)
    feats, coors = random_pillars(2, [180, 90], in_dim=9)
    model = SSTBackbone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    target = torch.zeros(2, 3, *GRID)
    target[0, 0, 10, 12] = 1.0
    target[1, 2, 20, 5] = 1.0
    for it in range(3):
        heatmap, occupied = model(feats, coors, batch_size=2)
        loss = focal_loss(heatmap, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"iter {it} loss {loss.item():.4f} occupied {int(occupied.sum())}")
