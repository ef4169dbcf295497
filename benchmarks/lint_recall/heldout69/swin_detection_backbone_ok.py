"""Swin Transformer backbone for object detection (mmdetection layout).

Shifted-window attention with a relative position bias; feature maps are padded
to a multiple of the window size, the attention mask of the shifted windows is
computed for each input size, and the backbone feeds a small FPN with a dense
objectness head trained only on the valid (unpadded) region of each image.

Source: conventions.md section 2.3; seed self_attention_mask_guide.txt section 3
(generate_causal_mask) and section 7 (Q3).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def window_partition(x, window_size):
    b, h, w, c = x.shape
    x = x.view(b, h // window_size, window_size, w // window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, c)


def window_reverse(windows, window_size, h, w):
    b = int(windows.shape[0] / (h * w / window_size / window_size))
    x = windows.view(b, h // window_size, w // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim, window_size, num_heads):
        super().__init__()
        self.window_size, self.num_heads = window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing="ij"))
        coords = coords.flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window_size - 1
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * window_size - 1) + rel[..., 1])
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b_ // nw, nw, self.num_heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b_, n, c))


class SwinBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size):
        super().__init__()
        self.window_size, self.shift_size = window_size, shift_size
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size, num_heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, hw, attn_mask):
        h, w = hw
        b, _, c = x.shape
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        ws = self.window_size
        pad_r, pad_b = (ws - w % ws) % ws, (ws - h % ws) % ws
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        hp, wp = x.shape[1], x.shape[2]
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        else:
            attn_mask = None
        windows = window_partition(x, ws).view(-1, ws * ws, c)
        windows = self.attn(windows, mask=attn_mask).view(-1, ws, ws, c)
        x = window_reverse(windows, ws, hp, wp)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        x = x[:, :h, :w, :].reshape(b, h * w, c)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class BasicLayer(nn.Module):
    def __init__(self, dim, depth, num_heads, window_size=4, downsample=True):
        super().__init__()
        self.window_size, self.shift_size = window_size, window_size // 2
        self.blocks = nn.ModuleList([
            SwinBlock(dim, num_heads, window_size, 0 if i % 2 == 0 else window_size // 2) for i in range(depth)
        ])
        self.downsample = nn.Linear(4 * dim, 2 * dim) if downsample else None

    def shifted_window_mask(self, hp, wp, device):
        ws, shift = self.window_size, self.shift_size
        img_mask = torch.zeros((1, hp, wp, 1), device=device)
        slices = (slice(0, -ws), slice(-ws, -shift), slice(-shift, None))
        cnt = 0
        for hs in slices:
            for wsl in slices:
                img_mask[:, hs, wsl, :] = cnt
                cnt += 1
        mask_windows = window_partition(img_mask, ws).view(-1, ws * ws)
        return (mask_windows.unsqueeze(1) != mask_windows.unsqueeze(2)).float() * -100.0

    def forward(self, x, h, w):
        hp = -(-h // self.window_size) * self.window_size
        wp = -(-w // self.window_size) * self.window_size
        attn_mask = self.shifted_window_mask(hp, wp, x.device)
        for blk in self.blocks:
            x = blk(x, (h, w), attn_mask)
        out = x
        if self.downsample is not None:
            b, _, c = x.shape
            x = x.view(b, h, w, c)
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
            x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
            h, w = x.shape[1], x.shape[2]
            x = self.downsample(x.view(b, -1, 4 * c))
        return out, x, h, w


class SwinFPNDetector(nn.Module):
    def __init__(self, embed_dim=32, depths=(2, 2), heads=(2, 4), window_size=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, 4, 4)
        dims = [embed_dim * 2 ** i for i in range(len(depths))]
        self.layers = nn.ModuleList([
            BasicLayer(d, n, h, window_size, downsample=i < len(depths) - 1)
            for i, (d, n, h) in enumerate(zip(dims, depths, heads))
        ])
        self.lateral = nn.ModuleList([nn.Conv2d(d, 64, 1) for d in dims])
        self.objectness = nn.Conv2d(64, 1, 3, padding=1)

    def forward(self, images, pad_mask):
        x = self.patch_embed(images)
        b, c, h, w = x.shape
        x = x.flatten(2).transpose(1, 2)
        outs = []
        for layer, lat in zip(self.layers, self.lateral):
            out, x, nh, nw = layer(x, h, w)
            outs.append(lat(out.transpose(1, 2).reshape(b, -1, h, w)))
            h, w = nh, nw
        p = outs[-1]
        for lower in reversed(outs[:-1]):
            p = lower + F.interpolate(p, size=lower.shape[-2:], mode="nearest")
        logits = self.objectness(p)[:, 0]
        valid = F.interpolate((~pad_mask)[:, None].float(), size=logits.shape[-2:])[:, 0] > 0.5
        return logits, valid


if __name__ == "__main__":
    torch.manual_seed(0)
    images = torch.zeros(2, 3, 72, 96)
    pad_mask = torch.ones(2, 72, 96, dtype=torch.bool)
    images[0], pad_mask[0] = torch.randn(3, 72, 96), False
    images[1, :, :56, :80], pad_mask[1, :56, :80] = torch.randn(3, 56, 80), False
    model = SwinFPNDetector()
    logits, valid = model(images, pad_mask)
    target = (torch.rand_like(logits) > 0.8).float()
    loss = F.binary_cross_entropy_with_logits(logits[valid], target[valid])
    loss.backward()
    print("objectness", tuple(logits.shape), "loss", round(loss.item(), 4))
