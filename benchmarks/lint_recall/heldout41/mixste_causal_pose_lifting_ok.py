"""Seq2seq 2D-to-3D human pose lifting with MixSTE, in its causal (online) configuration.

Layout of JinluZhang1126/MixSTE (Zhang et al., CVPR 2022, common/model_cross.py): timm-style
Mlp / Attention / Block with DropPath, alternating spatial (STE) and temporal (TTE) blocks in
STE_forward / TTE_foward / ST_foward, Spatial_pos_embed and Temporal_pos_embed, a regression
head per frame and joint, with VideoPose3D's causal option, mpjpe / p_mpjpe and a
Human3.6M-like 17-joint synthetic capture projected through a pinhole camera.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3
"""

import math

import numpy as np
import torch
import torch.nn as nn


def causal_temporal_bias(num_frame, device=None):
    return torch.triu(torch.full((num_frame, num_frame), float("-inf"), device=device), diagonal=1)


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        random_tensor = keep_prob + torch.rand((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype, device=x.device)
        return x.div(keep_prob) * random_tensor.floor_()


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_bias=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if attn_bias is not None:
            attn = attn + attn_bias
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False, qk_scale=None, drop=0.0, attn_drop=0.0,
                 drop_path=0.0, act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale,
                              attn_drop=attn_drop, proj_drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer, drop=drop)

    def forward(self, x, attn_bias=None):
        x = x + self.drop_path(self.attn(self.norm1(x), attn_bias=attn_bias))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class MixSTE2(nn.Module):
    def __init__(self, num_frame=27, num_joints=17, in_chans=2, embed_dim_ratio=32, depth=4, num_heads=8,
                 mlp_ratio=2.0, qkv_bias=True, drop_rate=0.0, drop_path_rate=0.1, causal=False):
        super().__init__()
        embed_dim = embed_dim_ratio
        self.Spatial_patch_to_embedding = nn.Linear(in_chans, embed_dim_ratio)
        self.Spatial_pos_embed = nn.Parameter(torch.zeros(1, num_joints, embed_dim_ratio))
        self.Temporal_pos_embed = nn.Parameter(torch.zeros(1, num_frame, embed_dim))
        nn.init.trunc_normal_(self.Spatial_pos_embed, std=0.02)
        nn.init.trunc_normal_(self.Temporal_pos_embed, std=0.02)
        self.pos_drop = nn.Dropout(p=drop_rate)
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.block_depth = depth
        self.STEblocks = nn.ModuleList([
            Block(embed_dim_ratio, num_heads, mlp_ratio, qkv_bias, drop=drop_rate, drop_path=dpr[i])
            for i in range(depth)])
        self.TTEblocks = nn.ModuleList([
            Block(embed_dim, num_heads, mlp_ratio, qkv_bias, drop=drop_rate, drop_path=dpr[i])
            for i in range(depth)])
        self.Spatial_norm = nn.LayerNorm(embed_dim_ratio, eps=1e-6)
        self.Temporal_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Sequential(nn.LayerNorm(embed_dim), nn.Linear(embed_dim, 3))
        if causal:
            self.register_buffer("temporal_bias", causal_temporal_bias(num_frame), persistent=False)
        else:
            self.temporal_bias = None

    def STE_forward(self, x):
        b, f, n, c = x.shape
        x = x.reshape(b * f, n, c)
        x = self.pos_drop(self.Spatial_patch_to_embedding(x) + self.Spatial_pos_embed)
        x = self.Spatial_norm(self.STEblocks[0](x))
        return x.reshape(b, f, n, -1).permute(0, 2, 1, 3).reshape(b * n, f, -1)

    def TTE_foward(self, x):
        assert len(x.shape) == 3, "shape is equal to 3"
        x = self.pos_drop(x + self.Temporal_pos_embed)
        x = self.TTEblocks[0](x, attn_bias=self.temporal_bias)
        return self.Temporal_norm(x)

    def ST_foward(self, x):
        assert len(x.shape) == 4, "shape is equal to 4"
        b, f, n, cw = x.shape
        for i in range(1, self.block_depth):
            x = self.Spatial_norm(self.STEblocks[i](x.reshape(b * f, n, cw)))
            x = x.reshape(b, f, n, cw).permute(0, 2, 1, 3).reshape(b * n, f, cw)
            x = self.Temporal_norm(self.TTEblocks[i](x, attn_bias=self.temporal_bias))
            x = x.reshape(b, n, f, cw).permute(0, 2, 1, 3)
        return x

    def forward(self, x):
        b, f, n, c = x.shape
        x = self.TTE_foward(self.STE_forward(x))
        x = x.reshape(b, n, f, -1).permute(0, 2, 1, 3)
        x = self.head(self.ST_foward(x))
        return x.view(b, f, n, -1)


def mpjpe(predicted, target):
    return torch.mean(torch.norm(predicted - target, dim=len(target.shape) - 1))


def p_mpjpe(predicted, target):
    errors = []
    for p, t in zip(predicted.reshape(-1, 17, 3).numpy(), target.reshape(-1, 17, 3).numpy()):
        mu_x, mu_y = t.mean(0), p.mean(0)
        x0, y0 = t - mu_x, p - mu_y
        x0 /= np.linalg.norm(x0)
        y0 /= np.linalg.norm(y0)
        U, s, Vt = np.linalg.svd(x0.T @ y0)
        R = Vt.T @ U.T
        if np.linalg.det(R) < 0:
            Vt[-1] *= -1
            s[-1] *= -1
            R = Vt.T @ U.T
        aligned = s.sum() * np.linalg.norm(t - mu_x) * (y0 @ R) + mu_x
        errors.append(np.linalg.norm(aligned - t, axis=-1).mean())
    return float(np.mean(errors))


def synthetic_clips(n, num_frame=27, gen=None):
    base = torch.randn(17, 3, generator=gen) * torch.tensor([0.25, 0.45, 0.15])
    base[0] = 0.0
    freq = 0.5 + torch.rand(n, 1, 17, 3, generator=gen)
    phase = 2 * math.pi * torch.rand(n, 1, 17, 3, generator=gen)
    t = torch.arange(num_frame, dtype=torch.float)[None, :, None, None] / 10.0
    pose = base + 0.1 * torch.sin(freq * t + phase)
    pose = pose - pose[:, :, :1]
    yaw = 2 * math.pi * torch.rand(n, generator=gen)
    cos, sin = torch.cos(yaw)[:, None, None], torch.sin(yaw)[:, None, None]
    x = cos * pose[..., 0] + sin * pose[..., 2]
    z = -sin * pose[..., 0] + cos * pose[..., 2]
    cam = torch.stack([x, pose[..., 1], z], dim=-1)
    depth = cam[..., 2] + 5.0
    keypoints = torch.stack([cam[..., 0] / depth, cam[..., 1] / depth], dim=-1) * 2.0
    return keypoints, cam


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = MixSTE2(num_frame=27, embed_dim_ratio=32, depth=4, num_heads=4, causal=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    train_2d, train_3d = synthetic_clips(512, gen=gen)
    test_2d, test_3d = synthetic_clips(64, gen=gen)
    for epoch in range(5):
        model.train()
        for b in range(0, 512, 32):
            loss = mpjpe(model(train_2d[b:b + 32]), train_3d[b:b + 32])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(test_2d)
        test_mpjpe = 1000 * mpjpe(pred, test_3d).item()
        print(f"epoch {epoch} train {1000 * loss.item():.1f} mm, test MPJPE {test_mpjpe:.1f} mm")
    if torch.isfinite(pred).all():
        print(f"P-MPJPE {1000 * p_mpjpe(pred, test_3d):.1f} mm")
    with torch.no_grad():
        future = test_2d.clone()
        future[:, 14:] = torch.randn(future[:, 14:].shape, generator=gen)
        moved = (model(future)[:, :14] - pred[:, :14]).abs().max().item()
    print(f"frames 0-13 after changing frames 14-26: {moved:.2e}")
