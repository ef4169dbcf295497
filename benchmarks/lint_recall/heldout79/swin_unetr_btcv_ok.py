"""Swin-UNETR-style 3-D segmentation of abdominal organs on CT (BTCV, 13 organs + background).

Shifted-window self-attention over a patch-embedded volume, with the
relative position bias and the shift mask of Swin-UNETR (MONAI layout:
window_partition / window_reverse / compute_mask, padding to window
multiples), followed by a light convolutional decoder and a Dice + CE loss.

Source: seed self_attention_mask_guide.txt §3 (常见误区: mask是加法而非乘法), §7 Q3; conventions.md §1 (direction cheat-sheet, additive masks).
"""
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 14


def window_partition(x, ws):
    b, d, h, w, c = x.shape
    x = x.view(b, d // ws[0], ws[0], h // ws[1], ws[1], w // ws[2], ws[2], c)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(-1, ws[0] * ws[1] * ws[2], c)


def window_reverse(windows, ws, dims):
    b, d, h, w = dims
    x = windows.view(b, d // ws[0], h // ws[1], w // ws[2], ws[0], ws[1], ws[2], -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, d, h, w, -1)


def compute_mask(dims, ws, ss, device):
    img_mask = torch.zeros((1, *dims, 1), device=device)
    cnt = 0
    for d, h, w in itertools.product(*[(slice(-ws[i]), slice(-ws[i], -ss[i]), slice(-ss[i], None)) for i in range(3)]):
        img_mask[:, d, h, w, :] = cnt
        cnt += 1
    mask_windows = window_partition(img_mask, ws).squeeze(-1)
    attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    return attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))


class WindowAttention(nn.Module):
    def __init__(self, dim, num_heads, window_size):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        ws = window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * ws[0] - 1) * (2 * ws[1] - 1) * (2 * ws[2] - 1), num_heads))
        coords = torch.stack(torch.meshgrid(*[torch.arange(s) for s in ws], indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
        rel[:, :, 0] += ws[0] - 1
        rel[:, :, 1] += ws[1] - 1
        rel[:, :, 2] += ws[2] - 1
        rel[:, :, 0] *= (2 * ws[1] - 1) * (2 * ws[2] - 1)
        rel[:, :, 1] *= 2 * ws[2] - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x, mask):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index[:n, :n].reshape(-1)]
        attn = attn + bias.reshape(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b // nw, nw, self.num_heads, n, n) + mask.to(attn.dtype).unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = self.softmax(attn)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class SwinBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size):
        super().__init__()
        self.ws, self.ss = window_size, shift_size
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, window_size)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, d, h, w, c = x.shape
        shortcut = x
        x = self.norm1(x)
        pads = [(s - n % s) % s for n, s in zip((d, h, w), self.ws)]
        x = F.pad(x, (0, 0, 0, pads[2], 0, pads[1], 0, pads[0]))
        dp, hp, wp = x.shape[1:4]
        if any(s > 0 for s in self.ss):
            x = torch.roll(x, shifts=[-s for s in self.ss], dims=(1, 2, 3))
            mask = compute_mask((dp, hp, wp), self.ws, self.ss, x.device)
        else:
            mask = None
        windows = self.attn(window_partition(x, self.ws), mask)
        x = window_reverse(windows, self.ws, (b, dp, hp, wp))
        if any(s > 0 for s in self.ss):
            x = torch.roll(x, shifts=list(self.ss), dims=(1, 2, 3))
        x = shortcut + x[:, :d, :h, :w].contiguous()
        return x + self.mlp(self.norm2(x))


class TinySwinUNETR(nn.Module):
    def __init__(self, dim=32, heads=4, window=(4, 4, 4)):
        super().__init__()
        self.embed = nn.Conv3d(1, dim, kernel_size=2, stride=2)
        shift = tuple(s // 2 for s in window)
        self.blocks = nn.ModuleList([SwinBlock(dim, heads, window, (0, 0, 0)), SwinBlock(dim, heads, window, shift)])
        self.skip = nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.InstanceNorm3d(16), nn.LeakyReLU())
        self.up = nn.ConvTranspose3d(dim, 16, kernel_size=2, stride=2)
        self.out = nn.Conv3d(32, NUM_CLASSES, 1)

    def forward(self, ct):
        x = self.embed(ct).permute(0, 2, 3, 4, 1)
        for blk in self.blocks:
            x = blk(x)
        up = self.up(x.permute(0, 4, 1, 2, 3))
        return self.out(torch.cat([up, self.skip(ct)], dim=1))


def dice_ce_loss(logits, labels, eps=1e-5):
    ce = F.cross_entropy(logits, labels)
    probs = logits.softmax(1)
    onehot = F.one_hot(labels, NUM_CLASSES).permute(0, 4, 1, 2, 3).float()
    inter = (probs * onehot).sum((2, 3, 4))
    dice = (2 * inter + eps) / (probs.sum((2, 3, 4)) + onehot.sum((2, 3, 4)) + eps)
    return ce + 1 - dice[:, 1:].mean()


if __name__ == "__main__":
    torch.manual_seed(0)
    ct = torch.randn(2, 1, 16, 20, 16)
    labels = torch.randint(0, NUM_CLASSES, (2, 16, 20, 16))
    model = TinySwinUNETR()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = dice_ce_loss(model(ct), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(ct).argmax(1)
    print("loss", round(loss.item(), 4), "organs predicted", pred.unique().numel())
