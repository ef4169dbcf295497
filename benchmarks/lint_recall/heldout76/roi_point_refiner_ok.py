"""Second-stage proposal refinement on raw LiDAR points with Point Transformer layers.

For every first-stage proposal the points inside the (enlarged) box are
pooled, moved into the box's canonical frame and padded to ``num_points``.
Point Transformer layers (vector attention over the k nearest points) encode
them, a masked max-pool gives the ROI feature, and two heads predict the box
residual and an IoU-aware confidence. Distant objects often carry only a
handful of points.

Source: TransformerLens PR #366 (conventions.md §3 item 20); conventions.md §1 (direction cheat-sheet) and §2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = {"num_points": 32, "nsample": 16, "channels": 64, "blocks": 2, "enlarge": 0.5}


def rotate_z(points, angle):
    cos, sin = torch.cos(angle), torch.sin(angle)
    x = points[..., 0] * cos[:, None] - points[..., 1] * sin[:, None]
    y = points[..., 0] * sin[:, None] + points[..., 1] * cos[:, None]
    return torch.stack([x, y, points[..., 2]], dim=-1)


def roi_pool(points, rois, num_points, enlarge):
    pooled, valid = [], []
    for box in rois:
        local = rotate_z((points[:, :3] - box[:3])[None], -box[6:7])[0]
        half = (box[3:6] + enlarge) / 2
        inside = (local.abs() <= half).all(dim=-1)
        sel = local[inside][:num_points] / box[3:6].clamp(min=0.1)
        feats = torch.cat([sel, points[inside][:num_points, 3:]], dim=-1)
        pooled.append(F.pad(feats, (0, 0, 0, num_points - feats.size(0))))
        valid.append(torch.arange(num_points) < feats.size(0))
    return torch.stack(pooled), torch.stack(valid)


def knn(xyz, valid, k):
    dist = torch.cdist(xyz, xyz)
    dist = dist.masked_fill(~valid[:, None, :], float("inf"))
    d, idx = dist.topk(k, dim=-1, largest=False)
    return idx, torch.isfinite(d)


def gather_neighbors(x, idx):
    r, n, k = idx.shape
    return x.gather(1, idx.reshape(r, n * k, 1).expand(-1, -1, x.size(-1))).view(r, n, k, -1)


class PointTransformerLayer(nn.Module):
    def __init__(self, channels, nsample):
        super().__init__()
        self.nsample = nsample
        self.linear_q = nn.Linear(channels, channels)
        self.linear_k = nn.Linear(channels, channels)
        self.linear_v = nn.Linear(channels, channels)
        self.linear_p = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3), nn.ReLU(inplace=True), nn.Linear(3, channels))
        self.linear_w = nn.Sequential(nn.LayerNorm(channels), nn.ReLU(inplace=True), nn.Linear(channels, channels // 8),
                                      nn.LayerNorm(channels // 8), nn.ReLU(inplace=True), nn.Linear(channels // 8, channels // 8))
        self.softmax = nn.Softmax(dim=2)
        self.share = 8

    def forward(self, xyz, x, valid):
        idx, nbr_valid = knn(xyz, valid, self.nsample)
        x_q, x_k, x_v = self.linear_q(x), self.linear_k(x), self.linear_v(x)
        p_r = self.linear_p(gather_neighbors(xyz, idx) - xyz[:, :, None])
        x_k, x_v = gather_neighbors(x_k, idx), gather_neighbors(x_v, idx)
        w = self.linear_w(x_k - x_q[:, :, None] + p_r)
        w = w.masked_fill(~nbr_valid[..., None], torch.finfo(w.dtype).min)
        w = self.softmax(w)
        r, n, k, c = x_v.shape
        out = ((x_v + p_r).view(r, n, k, self.share, c // self.share) * w.unsqueeze(3)).sum(2).view(r, n, c)
        return out


class PointTransformerBlock(nn.Module):
    def __init__(self, channels, nsample):
        super().__init__()
        self.linear1 = nn.Linear(channels, channels, bias=False)
        self.norm1 = nn.LayerNorm(channels)
        self.transformer = PointTransformerLayer(channels, nsample)
        self.norm2 = nn.LayerNorm(channels)
        self.linear3 = nn.Linear(channels, channels, bias=False)
        self.norm3 = nn.LayerNorm(channels)

    def forward(self, xyz, x, valid):
        identity = x
        x = F.relu(self.norm1(self.linear1(x)))
        x = F.relu(self.norm2(self.transformer(xyz, x, valid)))
        x = self.norm3(self.linear3(x))
        return F.relu(x + identity) * valid[..., None]


class RoIPointRefiner(nn.Module):
    def __init__(self, cfg=CFG, in_dim=4):
        super().__init__()
        c = cfg["channels"]
        self.cfg = cfg
        self.stem = nn.Sequential(nn.Linear(in_dim, c), nn.LayerNorm(c), nn.ReLU())
        self.blocks = nn.ModuleList([PointTransformerBlock(c, cfg["nsample"]) for _ in range(cfg["blocks"])])
        self.reg_head = nn.Sequential(nn.Linear(c, c), nn.ReLU(), nn.Linear(c, 7))
        self.iou_head = nn.Sequential(nn.Linear(c, c), nn.ReLU(), nn.Linear(c, 1))

    def forward(self, points, rois):
        feats, valid = roi_pool(points, rois, self.cfg["num_points"], self.cfg["enlarge"])
        xyz = feats[..., :3]
        x = self.stem(feats)
        for block in self.blocks:
            x = block(xyz, x, valid)
        pooled = x.masked_fill(~valid[..., None], float("-inf")).amax(dim=1)
        has_points = valid.any(dim=1)
        pooled = torch.where(has_points[:, None], pooled, torch.zeros_like(pooled))
        return self.reg_head(pooled), self.iou_head(pooled).squeeze(-1), has_points


def decode_boxes(rois, residual):
    diag = torch.sqrt(rois[:, 3] ** 2 + rois[:, 4] ** 2)
    xy = rois[:, :2] + residual[:, :2] * diag[:, None]
    z = rois[:, 2:3] + residual[:, 2:3] * rois[:, 5:6]
    size = rois[:, 3:6] * residual[:, 3:6].exp()
    yaw = rois[:, 6:7] + residual[:, 6:7]
    return torch.cat([xy, z, size, yaw], dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    rois = torch.tensor([[10.0, 2.0, -0.8, 4.2, 1.8, 1.6, 0.3], [42.0, -7.0, -0.7, 4.0, 1.7, 1.5, -1.2],
                         [5.0, -3.0, -0.9, 0.7, 0.7, 1.8, 0.0], [60.0, 20.0, -1.0, 4.5, 1.9, 1.7, 2.0]])
    clouds = []
    for box, n in zip(rois, (40, 9, 14, 0)):
        local = (torch.rand(n, 3) - 0.5) * box[3:6]
        clouds.append(torch.cat([rotate_z(local[None], box[6:7])[0] + box[:3], torch.rand(n, 1)], dim=1))
    points = torch.cat(clouds + [torch.randn(200, 4) * 30], dim=0)
    model = RoIPointRefiner()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gt_iou = torch.tensor([0.8, 0.6, 0.7, 0.0])
    for it in range(3):
        residual, iou_logit, has_points = model(points, rois)
        loss = F.smooth_l1_loss(residual[has_points], torch.zeros_like(residual[has_points]))
        loss = loss + F.binary_cross_entropy_with_logits(iou_logit, gt_iou)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"iter {it} loss {loss.item():.4f}")
    print("refined", [[round(v, 2) for v in b] for b in decode_boxes(rois, residual.detach())[:2].tolist()])
    print("points per roi", roi_pool(points, rois, CFG["num_points"], CFG["enlarge"])[1].sum(1).tolist())
