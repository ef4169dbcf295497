"""TransFusion-style LiDAR-camera detection head with image-guided query fusion.

Object queries are initialised from the local maxima of a class heatmap on
the LiDAR BEV features. A first decoder layer reads the BEV features; the
image fusion layer then projects each query's box centre into the camera
that sees it and lets the query attend to the image features in a circular
region around the projection (spatially modulated co-attention), so the
query does not drift to unrelated parts of the image.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25); seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOXEL = 0.8
PC_MIN = -25.6


def nms_heatmap(heatmap, kernel=3):
    peak = F.max_pool2d(heatmap, kernel, stride=1, padding=kernel // 2)
    return heatmap * (heatmap == peak).float()


def topk_queries(heatmap, k):
    b, c, h, w = heatmap.shape
    scores, idx = nms_heatmap(heatmap).flatten(1).topk(k, dim=-1)
    labels = idx // (h * w)
    cell = idx % (h * w)
    xy = torch.stack([cell % w, cell // w], dim=-1).float() + 0.5
    return cell, labels, xy, scores


class ImageFusion(nn.Module):
    def __init__(self, d, heads, stride):
        super().__init__()
        self.heads, self.stride = heads, stride
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, query, centers, dims, img_feats, lidar2img, img_hw):
        b, q, d = query.shape
        n, h, w = img_feats.shape[1], img_feats.shape[3], img_feats.shape[4]
        pts = torch.cat([centers, torch.ones_like(centers[..., :1])], dim=-1)
        cam = torch.einsum("bnij,bqj->bnqi", lidar2img, pts)
        depth = cam[..., 2]
        uv = cam[..., :2] / depth.clamp(min=1e-3)[..., None]
        on_img = (depth > 1e-3) & (uv[..., 0] >= 0) & (uv[..., 0] < img_hw[1]) & (uv[..., 1] >= 0) & (uv[..., 1] < img_hw[0])
        has_cam = on_img.any(dim=1)
        cam_id = on_img.float().argmax(dim=1)
        sel = cam_id[:, None, :, None]
        uv = uv.gather(1, sel.expand(-1, -1, -1, 2)).squeeze(1)
        depth = depth.gather(1, cam_id[:, None]).squeeze(1).clamp(min=1e-3)
        focal = lidar2img[:, 0, 0, :3].norm(dim=-1)
        radius = (focal[:, None] * dims[..., :2].amax(-1) / depth / 2).clamp(min=self.stride)
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        pix = (torch.stack([xs, ys], dim=-1).flatten(0, 1).float() + 0.5) * self.stride
        in_region = ((pix[None, None] - uv[:, :, None]).pow(2).sum(-1) <= radius[..., None] ** 2).float()
        feats = img_feats.flatten(3).transpose(2, 3)
        feats = feats.gather(1, cam_id[:, :, None, None].expand(-1, -1, h * w, d))
        hd = d // self.heads
        qh = self.q(query).view(b, q, self.heads, 1, hd).transpose(1, 2)
        kh = self.k(feats).view(b, q, h * w, self.heads, hd).permute(0, 3, 1, 2, 4)
        vh = self.v(feats).view(b, q, h * w, self.heads, hd).permute(0, 3, 1, 2, 4)
        logits = (qh @ kh.transpose(-1, -2)).squeeze(-2) / math.sqrt(hd)
        logits = logits.masked_fill(in_region[:, None] == 0, torch.finfo(logits.dtype).min)
        attn = logits.softmax(dim=-1)
        fused = (attn.unsqueeze(-2) @ vh).squeeze(-2).transpose(1, 2).reshape(b, q, d)
        fused = fused * has_cam[..., None].to(fused.dtype)
        return self.norm(query + self.out(fused)), has_cam


class TransFusionHead(nn.Module):
    def __init__(self, d=64, num_classes=3, num_proposals=12, heads=4, img_stride=8):
        super().__init__()
        self.num_proposals = num_proposals
        self.heatmap_head = nn.Conv2d(d, num_classes, 3, padding=1)
        self.class_encoding = nn.Linear(num_classes, d)
        self.pos_embed = nn.Sequential(nn.Linear(2, d), nn.ReLU(), nn.Linear(d, d))
        self.lidar_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.lidar_norm = nn.LayerNorm(d)
        self.img_fusion = ImageFusion(d, heads, img_stride)
        self.box_head = nn.Linear(d, 2 + 1 + 3 + 2)
        self.cls_head = nn.Linear(d, num_classes)

    def decode(self, query, ref_xy):
        out = self.box_head(query)
        xy = (ref_xy + out[..., :2]) * VOXEL + PC_MIN
        dims = out[..., 3:6].exp().clamp(max=20.0)
        return torch.cat([xy, out[..., 2:3]], -1), dims, out[..., 6:8]

    def forward(self, bev, img_feats, lidar2img, img_hw):
        b, d, h, w = bev.shape
        heatmap = self.heatmap_head(bev).sigmoid()
        cell, labels, ref_xy, _ = topk_queries(heatmap.detach(), self.num_proposals)
        bev_flat = bev.flatten(2).transpose(1, 2)
        query = bev_flat.gather(1, cell[..., None].expand(-1, -1, d))
        query = query + self.class_encoding(F.one_hot(labels, heatmap.size(1)).float())
        bev_pos = self.pos_embed(torch.stack(torch.meshgrid(torch.arange(w), torch.arange(h), indexing="xy"), -1).flatten(0, 1).float() + 0.5)
        q_pos = self.pos_embed(ref_xy)
        query = self.lidar_norm(query + self.lidar_attn(query + q_pos, bev_flat + bev_pos, bev_flat, need_weights=False)[0])
        centers, dims, _ = self.decode(query, ref_xy)
        query, has_cam = self.img_fusion(query, centers, dims, img_feats, lidar2img, img_hw)
        centers, dims, rot = self.decode(query, ref_xy)
        return {"heatmap": heatmap, "centers": centers, "dims": dims, "rot": rot, "cls": self.cls_head(query), "has_cam": has_cam}


def two_camera_rig(b, img_hw):
    h, w = img_hw
    f = w / 2 / math.tan(math.radians(45))
    k = torch.tensor([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1.0]])
    mats = []
    for yaw in (0.0, math.pi):
        rot = torch.tensor([[math.sin(yaw), -math.cos(yaw), 0.0], [0.0, 0.0, -1.0], [math.cos(yaw), math.sin(yaw), 0.0]])
        m = torch.eye(4)
        m[:3, :3] = k @ rot
        m[:3, 3] = k @ (-rot @ torch.tensor([0.0, 0.0, 1.7]))
        mats.append(m)
    return torch.stack(mats)[None].repeat(b, 1, 1, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    head = TransFusionHead(d=64, num_classes=3, num_proposals=12)
    bev = torch.randn(2, 64, 64, 64)
    img_hw = (64, 128)
    img_feats = torch.randn(2, 2, 64, 8, 16)
    out = head(bev, img_feats, two_camera_rig(2, img_hw), img_hw)
    target = torch.zeros_like(out["heatmap"])
    target[:, 0, 30:34, 40:44] = 1.0
    loss = F.binary_cross_entropy(out["heatmap"].clamp(1e-4, 1 - 1e-4), target) + out["dims"].mean()
    loss.backward()
    print("centers", tuple(out["centers"].shape), "queries on an image", out["has_cam"].sum().item(), "loss", round(loss.item(), 4))
