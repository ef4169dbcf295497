"""BEVFormer-style BEV encoder layer: temporal self-attention and spatial cross-attention.

Each BEV query owns a pillar of 3-D reference points. The pillars are
projected into the surround cameras (``point_sampling`` as in BEVFormer),
the camera features are sampled at the hits, weighted per point and averaged
over the cameras that see the pillar. The previous frame's BEV is shifted by
the ego motion and read by temporal self-attention before that.

Source: seed masked_fill_inplace.txt (注意（原地操作的坑）: 梯度计算风险; 总结).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PC_RANGE = [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0]


def get_reference_points(bev_h, bev_w, z_range=8.0, num_points_in_pillar=4, bs=1):
    zs = torch.linspace(0.5, z_range - 0.5, num_points_in_pillar).view(-1, 1, 1).expand(-1, bev_h, bev_w) / z_range
    xs = torch.linspace(0.5, bev_w - 0.5, bev_w).view(1, 1, bev_w).expand(num_points_in_pillar, bev_h, bev_w) / bev_w
    ys = torch.linspace(0.5, bev_h - 0.5, bev_h).view(1, bev_h, 1).expand(num_points_in_pillar, bev_h, bev_w) / bev_h
    ref_3d = torch.stack((xs, ys, zs), -1).permute(0, 3, 1, 2).flatten(2).permute(0, 2, 1)
    return ref_3d[None].repeat(bs, 1, 1, 1)


def point_sampling(reference_points, lidar2img, img_shape):
    ref = reference_points.clone()
    for i in range(3):
        ref[..., i] = ref[..., i] * (PC_RANGE[i + 3] - PC_RANGE[i]) + PC_RANGE[i]
    ref = torch.cat((ref, torch.ones_like(ref[..., :1])), -1).permute(1, 0, 2, 3)
    d, b, q = ref.shape[:3]
    n = lidar2img.size(1)
    ref = ref.view(d, b, 1, q, 4, 1).repeat(1, 1, n, 1, 1, 1)
    l2i = lidar2img.view(1, b, n, 1, 4, 4).repeat(d, 1, 1, q, 1, 1)
    cam = torch.matmul(l2i, ref).squeeze(-1)
    eps = 1e-5
    bev_mask = cam[..., 2:3] > eps
    cam = cam[..., 0:2] / torch.maximum(cam[..., 2:3], torch.ones_like(cam[..., 2:3]) * eps)
    cam[..., 0] /= img_shape[1]
    cam[..., 1] /= img_shape[0]
    bev_mask = bev_mask & (cam[..., 1:2] > 0.0) & (cam[..., 1:2] < 1.0) & (cam[..., 0:1] < 1.0) & (cam[..., 0:1] > 0.0)
    return cam.permute(2, 1, 3, 0, 4), bev_mask.permute(2, 1, 3, 0, 4).squeeze(-1)


def shift_bev(prev_bev, shift, bev_h, bev_w):
    b, _, c = prev_bev.shape
    grid = prev_bev.view(b, bev_h, bev_w, c)
    valid = torch.ones(b, bev_h, bev_w, dtype=torch.bool)
    out, ok = torch.zeros_like(grid), torch.zeros_like(valid)
    for i, (dy, dx) in enumerate(shift.tolist()):
        ys, yd = (slice(0, bev_h - dy), slice(dy, bev_h)) if dy >= 0 else (slice(-dy, bev_h), slice(0, bev_h + dy))
        xs, xd = (slice(0, bev_w - dx), slice(dx, bev_w)) if dx >= 0 else (slice(-dx, bev_w), slice(0, bev_w + dx))
        out[i, yd, xd] = grid[i, ys, xs]
        ok[i, yd, xd] = valid[i, ys, xs]
    return out.view(b, -1, c), ~ok.view(b, -1)


class SpatialCrossAttention(nn.Module):
    def __init__(self, embed_dims=64, num_cams=6, num_points=4):
        super().__init__()
        self.num_cams = num_cams
        self.num_points = num_points
        self.attention_weights = nn.Linear(embed_dims, num_cams * num_points)
        self.value_proj = nn.Linear(embed_dims, embed_dims)
        self.output_proj = nn.Linear(embed_dims, embed_dims)
        self.dropout = nn.Dropout(0.1)

    def forward(self, query, feats, reference_points_cam, bev_mask):
        b, q, c = query.shape
        n, _, _, d, _ = reference_points_cam.shape
        value = self.value_proj(feats.permute(0, 1, 3, 4, 2)).permute(0, 1, 4, 2, 3)
        grid = reference_points_cam.transpose(0, 1).flatten(0, 1) * 2 - 1
        sampled = F.grid_sample(value.flatten(0, 1), grid, align_corners=False)
        sampled = sampled.view(b, n, c, q, d).permute(0, 1, 3, 4, 2)
        weights = self.attention_weights(query).sigmoid().view(b, q, n, d).permute(0, 2, 1, 3)
        hits = bev_mask.transpose(0, 1)
        weights.masked_fill_(~hits, 0.0)  # expect: MC505 gate
        slots = (sampled * weights[..., None]).sum(dim=3).sum(dim=1)
        count = hits.any(-1).sum(dim=1).clamp(min=1)
        slots = slots / count[..., None].to(slots.dtype)
        return query + self.dropout(self.output_proj(slots))


class BEVFormerLayer(nn.Module):
    def __init__(self, bev_h=10, bev_w=10, embed_dims=64, num_heads=4, num_cams=6, num_points=4):
        super().__init__()
        self.bev_h, self.bev_w = bev_h, bev_w
        self.temporal_attn = nn.MultiheadAttention(embed_dims, num_heads, batch_first=True)
        self.spatial_attn = SpatialCrossAttention(embed_dims, num_cams, num_points)
        self.ffn = nn.Sequential(nn.Linear(embed_dims, 2 * embed_dims), nn.ReLU(), nn.Linear(2 * embed_dims, embed_dims))
        self.norms = nn.ModuleList([nn.LayerNorm(embed_dims) for _ in range(3)])
        self.num_points = num_points

    def forward(self, bev_query, bev_pos, feats, lidar2img, img_shape, prev_bev=None, shift=None, prev_exists=None):
        b = bev_query.size(0)
        if prev_bev is None:
            prev_bev, hist_pad = bev_query, torch.zeros(b, bev_query.size(1), dtype=torch.bool)
        else:
            prev_bev, hist_pad = shift_bev(prev_bev, shift, self.bev_h, self.bev_w)
            prev_bev = torch.where(prev_exists[:, None, None], prev_bev, bev_query)
            hist_pad = hist_pad & prev_exists[:, None]
        q = bev_query + bev_pos
        x = bev_query + self.temporal_attn(q, prev_bev, prev_bev, key_padding_mask=hist_pad, need_weights=False)[0]
        x = self.norms[0](x)
        ref_3d = get_reference_points(self.bev_h, self.bev_w, num_points_in_pillar=self.num_points, bs=b)
        ref_cam, bev_mask = point_sampling(ref_3d, lidar2img, img_shape)
        x = self.norms[1](self.spatial_attn(x + bev_pos, feats, ref_cam, bev_mask) - bev_pos)
        return self.norms[2](x + self.ffn(x))


def surround_rig(b, n, img_shape):
    h, w = img_shape
    f = w / (2 * math.tan(math.radians(40)))
    k = torch.tensor([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1.0]])
    mats = []
    for i in range(n):
        yaw = 2 * math.pi * i / n
        rot = torch.tensor([[math.sin(yaw), -math.cos(yaw), 0.0], [0.0, 0.0, -1.0], [math.cos(yaw), math.sin(yaw), 0.0]])
        m = torch.eye(4)
        m[:3, :3] = k @ rot
        m[:3, 3] = k @ (-rot @ torch.tensor([0.0, 0.0, 1.8]))
        mats.append(m)
    return torch.stack(mats)[None].repeat(b, 1, 1, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    layer = BEVFormerLayer(bev_h=10, bev_w=10, embed_dims=64, num_heads=4, num_cams=6, num_points=4).eval()
    bev_embed = nn.Embedding(100, 64)
    bev_pos = torch.randn(1, 100, 64).expand(2, -1, -1)
    img_shape = (32, 56)
    lidar2img = surround_rig(2, 6, img_shape)
    prev_bev = None
    with torch.no_grad():
        for frame in range(2):
            feats = torch.randn(2, 6, 64, 8, 14)
            query = bev_embed.weight[None].expand(2, -1, -1)
            shift = torch.tensor([[1, 0], [0, -2]])
            prev_exists = torch.tensor([frame > 0, False])
            prev_bev = layer(query, bev_pos, feats, lidar2img, img_shape, prev_bev, shift, prev_exists)
            print(f"frame {frame} bev {tuple(prev_bev.shape)} mean |x| {prev_bev.abs().mean().item():.4f} finite {bool(torch.isfinite(prev_bev).all())}")
