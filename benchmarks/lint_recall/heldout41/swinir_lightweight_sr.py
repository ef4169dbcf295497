"""Lightweight image super-resolution (x2) with SwinIR.

Layout of JingyunLiang/SwinIR (models/network_swinir.py): window_partition / window_reverse,
WindowAttention with the relative position bias table, SwinTransformerBlock with cyclic shift
and calculate_mask, BasicLayer, RSTB with its convolution, PatchEmbed / PatchUnEmbed,
UpsampleOneStep (pixelshuffledirect), check_image_size, trained with L1 on bicubic-degraded
synthetic textures and evaluated by PSNR against bicubic upsampling.

Source: conventions.md §2.9 and §1 (HF 4-D masks row), transformers models/llama/modeling_llama.py:eager_attention_forward (quoted in conventions.md §2.9)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def window_partition(x, window_size):
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)


def window_reverse(windows, window_size, H, W):
    B = int(windows.shape[0] / (H * W / window_size / window_size))
    x = windows.view(B, H // window_size, W // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim, window_size, num_heads, qkv_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.window_size = window_size
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads))
        coords_h = torch.arange(window_size[0])
        coords_w = torch.arange(window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += window_size[0] - 1
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        self.register_buffer("relative_position_index", relative_coords.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        relative_position_bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1)
        attn = attn + relative_position_bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)  # expect: MC509 swinir
            attn = self.softmax(attn.view(-1, self.num_heads, N, N))
        else:
            attn = self.softmax(attn)
        x = (self.attn_drop(attn) @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj_drop(self.proj(x))


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, input_resolution, num_heads, window_size=7, shift_size=0, mlp_ratio=2.0):
        super().__init__()
        self.input_resolution = input_resolution
        self.window_size = window_size
        self.shift_size = shift_size
        if min(self.input_resolution) <= self.window_size:
            self.shift_size = 0
            self.window_size = min(self.input_resolution)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size=(self.window_size, self.window_size), num_heads=num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio))
        attn_mask = self.calculate_mask(self.input_resolution) if self.shift_size > 0 else None
        self.register_buffer("attn_mask", attn_mask)

    def calculate_mask(self, x_size):
        H, W = x_size
        img_mask = torch.zeros((1, H, W, 1))
        slices = (slice(0, -self.window_size), slice(-self.window_size, -self.shift_size),
                  slice(-self.shift_size, None))
        cnt = 0
        for h in slices:
            for w in slices:
                img_mask[:, h, w, :] = cnt
                cnt += 1
        mask_windows = window_partition(img_mask, self.window_size).view(-1, self.window_size * self.window_size)
        return mask_windows.unsqueeze(1) != mask_windows.unsqueeze(2)

    def forward(self, x, x_size):
        H, W = x_size
        B, L, C = x.shape
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        x_windows = window_partition(x, self.window_size).view(-1, self.window_size * self.window_size, C)
        if self.input_resolution == x_size:
            attn_windows = self.attn(x_windows, mask=self.attn_mask)
        else:
            mask = self.calculate_mask(x_size).to(x.device) if self.shift_size > 0 else None
            attn_windows = self.attn(x_windows, mask=mask)
        shifted_x = window_reverse(attn_windows.view(-1, self.window_size, self.window_size, C), self.window_size, H, W)
        if self.shift_size > 0:
            shifted_x = torch.roll(shifted_x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        x = shortcut + shifted_x.view(B, H * W, C)
        return x + self.mlp(self.norm2(x))


class RSTB(nn.Module):
    def __init__(self, dim, input_resolution, depth, num_heads, window_size):
        super().__init__()
        self.dim = dim
        self.blocks = nn.ModuleList([
            SwinTransformerBlock(dim, input_resolution, num_heads, window_size,
                                 shift_size=0 if (i % 2 == 0) else window_size // 2)
            for i in range(depth)])
        self.conv = nn.Conv2d(dim, dim, 3, 1, 1)

    def forward(self, x, x_size):
        res = x
        for blk in self.blocks:
            res = blk(res, x_size)
        res = res.transpose(1, 2).view(x.shape[0], self.dim, x_size[0], x_size[1])
        return self.conv(res).flatten(2).transpose(1, 2) + x


class SwinIR(nn.Module):
    def __init__(self, img_size=32, in_chans=3, embed_dim=32, depths=(2, 2), num_heads=(4, 4), window_size=4,
                 upscale=2, img_range=1.0):
        super().__init__()
        self.img_range = img_range
        self.register_buffer("mean", torch.tensor([0.4488, 0.4371, 0.4040]).view(1, 3, 1, 1))
        self.upscale = upscale
        self.window_size = window_size
        self.conv_first = nn.Conv2d(in_chans, embed_dim, 3, 1, 1)
        self.layers = nn.ModuleList([
            RSTB(embed_dim, (img_size, img_size), depths[i], num_heads[i], window_size) for i in range(len(depths))])
        self.patch_norm = nn.LayerNorm(embed_dim)
        self.norm = nn.LayerNorm(embed_dim)
        self.conv_after_body = nn.Conv2d(embed_dim, embed_dim, 3, 1, 1)
        self.upsample = nn.Sequential(nn.Conv2d(embed_dim, (upscale ** 2) * in_chans, 3, 1, 1),
                                      nn.PixelShuffle(upscale))

    def check_image_size(self, x):
        _, _, h, w = x.size()
        mod_pad_h = (self.window_size - h % self.window_size) % self.window_size
        mod_pad_w = (self.window_size - w % self.window_size) % self.window_size
        return F.pad(x, (0, mod_pad_w, 0, mod_pad_h), "reflect")

    def forward_features(self, x):
        x_size = (x.shape[2], x.shape[3])
        x = self.patch_norm(x.flatten(2).transpose(1, 2))
        for layer in self.layers:
            x = layer(x, x_size)
        x = self.norm(x)
        return x.transpose(1, 2).view(x.shape[0], -1, x_size[0], x_size[1])

    def forward(self, x):
        H, W = x.shape[2:]
        x = (self.check_image_size(x) - self.mean) * self.img_range
        x = self.conv_first(x)
        x = self.conv_after_body(self.forward_features(x)) + x
        x = self.upsample(x) / self.img_range + self.mean
        return x[:, :, : H * self.upscale, : W * self.upscale]


def calculate_psnr(img1, img2):
    mse = torch.mean((img1.clamp(0, 1) - img2) ** 2, dim=(1, 2, 3))
    return (20 * torch.log10(1.0 / torch.sqrt(mse))).mean().item()


def synthetic_textures(n, size=48, gen=None):
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    imgs = torch.zeros(n, 3, size, size)
    for _ in range(4):
        fx, fy = 12 * torch.rand(2, n, 1, 1, 1, generator=gen)
        phase = 2 * math.pi * torch.rand(n, 3, 1, 1, generator=gen)
        imgs += torch.sin(2 * math.pi * (fx * xx + fy * yy) + phase) * torch.rand(n, 3, 1, 1, generator=gen)
    lo, hi = imgs.amin(dim=(2, 3), keepdim=True), imgs.amax(dim=(2, 3), keepdim=True)
    imgs = (imgs - lo) / (hi - lo)
    hr = imgs.clamp(0, 1)
    lr = F.interpolate(hr, scale_factor=0.5, mode="bicubic", align_corners=False).clamp(0, 1)
    return lr, hr


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = SwinIR(img_size=24, embed_dim=32, depths=(2, 2), num_heads=(4, 4), window_size=4, upscale=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    test_lr, test_hr = synthetic_textures(32, gen=gen)
    for step in range(240):
        lr_img, hr_img = synthetic_textures(16, gen=gen)
        loss = F.l1_loss(model(lr_img), hr_img)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 80 == 0:
            print(f"step {step} L1 {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        sr = model(test_lr)
        bicubic = F.interpolate(test_lr, scale_factor=2, mode="bicubic", align_corners=False)
        print(f"PSNR SwinIR {calculate_psnr(sr, test_hr):.2f} dB, bicubic {calculate_psnr(bicubic, test_hr):.2f} dB")
        edited = test_lr.clone()
        edited[:, :, :2] = torch.rand(edited[:, :, :2].shape, generator=gen)
        leak = (model(edited)[:, :, -4:] - sr[:, :, -4:]).abs().max().item()
        print(f"bottom rows after changing the top rows: {leak:.2e}")
