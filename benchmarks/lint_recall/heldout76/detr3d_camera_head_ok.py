"""DETR3D-style multi-camera 3-D detection head.

Object queries carry a normalized 3-D reference point. Every decoder layer
projects the points into the surround cameras with the ``lidar2img`` matrices,
samples the multi-level camera features at the projected pixels, fuses the
samples with learned per-camera weights and refines the reference points.
Ported from the mmdet3d head to plain PyTorch; ``--half`` runs the head the
way the deployment script does, with ``model.half()`` and float16 features.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3 item 18); conventions.md §2.3 and §5 item 5.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PC_RANGE = (-51.2, -51.2, -5.0, 51.2, 51.2, 3.0)
EPS = 1e-5


def inverse_sigmoid(x, eps=EPS):
    x = x.clamp(min=0, max=1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def denormalize_points(ref):
    lo = ref.new_tensor(PC_RANGE[:3])
    hi = ref.new_tensor(PC_RANGE[3:])
    return ref * (hi - lo) + lo


def project_to_cameras(ref_points, lidar2img, img_shape):
    pts = denormalize_points(ref_points.float())
    pts = torch.cat([pts, torch.ones_like(pts[..., :1])], dim=-1)
    cam = torch.einsum("bnij,bqj->bnqi", lidar2img.float(), pts)
    depth = cam[..., 2:3]
    in_front = depth > EPS
    uv = cam[..., :2] / depth.clamp(min=EPS)
    h, w = img_shape
    grid = (uv / uv.new_tensor([w, h]) - 0.5) * 2
    inside = ((grid > -1.0) & (grid < 1.0)).all(-1, keepdim=True)
    return grid.clamp(-2.0, 2.0).to(ref_points.dtype), (in_front & inside).squeeze(-1)


class CameraFusion(nn.Module):
    def __init__(self, embed_dims=64, num_cams=6, num_levels=2):
        super().__init__()
        self.num_cams = num_cams
        self.num_levels = num_levels
        self.cam_weight = nn.Linear(embed_dims, num_cams * num_levels)
        self.position_encoder = nn.Sequential(
            nn.Linear(3, embed_dims), nn.LayerNorm(embed_dims), nn.ReLU(inplace=True),
            nn.Linear(embed_dims, embed_dims),
        )
        self.output_proj = nn.Linear(embed_dims, embed_dims)

    def forward(self, query, ref_points, mlvl_feats, img_metas):
        b, q, c = query.shape
        grid, visible = project_to_cameras(ref_points, img_metas["lidar2img"], img_metas["img_shape"])
        visible = visible & img_metas["cam_valid"][:, :, None]
        sampled = []
        for feat in mlvl_feats:
            n = feat.size(1)
            s = F.grid_sample(feat.flatten(0, 1), grid.flatten(0, 1).unsqueeze(2), align_corners=False)
            sampled.append(s.squeeze(-1).view(b, n, c, q))
        sampled = torch.stack(sampled, dim=-1).permute(0, 3, 1, 4, 2)
        vis = visible.transpose(1, 2)[..., None]
        cam_logits = self.cam_weight(query).view(b, q, self.num_cams, self.num_levels)
        cam_logits = cam_logits.masked_fill(~vis, torch.finfo(cam_logits.dtype).min)
        weights = cam_logits.flatten(2).softmax(-1).view_as(cam_logits)
        fused = (sampled * (weights * vis)[..., None]).sum(dim=(2, 3))
        seen = vis.any(dim=2).to(query.dtype)
        out = self.output_proj(fused) * seen
        return query + out + self.position_encoder(inverse_sigmoid(ref_points))


class DecoderLayer(nn.Module):
    def __init__(self, embed_dims=64, num_heads=4, num_cams=6, num_levels=2):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=0.1, batch_first=True)
        self.cross_attn = CameraFusion(embed_dims, num_cams, num_levels)
        self.ffn = nn.Sequential(nn.Linear(embed_dims, 2 * embed_dims), nn.ReLU(inplace=True), nn.Linear(2 * embed_dims, embed_dims))
        self.norms = nn.ModuleList([nn.LayerNorm(embed_dims) for _ in range(3)])

    def forward(self, query, query_pos, ref_points, mlvl_feats, img_metas):
        q = k = query + query_pos
        query = self.norms[0](query + self.self_attn(q, k, query, need_weights=False)[0])
        query = self.norms[1](self.cross_attn(query, ref_points, mlvl_feats, img_metas))
        return self.norms[2](query + self.ffn(query))


class Detr3DHead(nn.Module):
    def __init__(self, num_query=32, embed_dims=64, num_layers=3, num_classes=10, code_size=8, **kw):
        super().__init__()
        self.query_embedding = nn.Embedding(num_query, embed_dims * 2)
        self.reference_points = nn.Linear(embed_dims, 3)
        self.layers = nn.ModuleList([DecoderLayer(embed_dims, **kw) for _ in range(num_layers)])
        self.cls_branches = nn.ModuleList([nn.Linear(embed_dims, num_classes) for _ in range(num_layers)])
        self.reg_branches = nn.ModuleList([
            nn.Sequential(nn.Linear(embed_dims, embed_dims), nn.ReLU(), nn.Linear(embed_dims, code_size))
            for _ in range(num_layers)
        ])

    def forward(self, mlvl_feats, img_metas):
        b = mlvl_feats[0].size(0)
        query_pos, query = torch.split(self.query_embedding.weight, self.query_embedding.embedding_dim // 2, dim=1)
        query_pos = query_pos.unsqueeze(0).expand(b, -1, -1)
        query = query.unsqueeze(0).expand(b, -1, -1)
        ref_points = self.reference_points(query_pos).sigmoid()
        all_cls, all_boxes = [], []
        for lid, layer in enumerate(self.layers):
            query = layer(query, query_pos, ref_points, mlvl_feats, img_metas)
            delta = self.reg_branches[lid](query)
            new_ref = torch.cat([delta[..., 0:2], delta[..., 4:5]], -1) + inverse_sigmoid(ref_points)
            boxes = delta.clone()
            boxes[..., 0:2] = new_ref[..., 0:2].sigmoid()
            boxes[..., 4:5] = new_ref[..., 2:3].sigmoid()
            ref_points = new_ref.sigmoid().detach()
            all_cls.append(self.cls_branches[lid](query))
            all_boxes.append(boxes)
        return torch.stack(all_cls), torch.stack(all_boxes)


def make_rig(batch_size, num_cams, img_shape, dtype=torch.float32):
    h, w = img_shape
    focal = w / (2 * math.tan(math.radians(35)))
    intrinsic = torch.tensor([[focal, 0, w / 2], [0, focal, h / 2], [0, 0, 1.0]])
    mats = []
    for i in range(num_cams):
        yaw = 2 * math.pi * i / num_cams
        right = [math.sin(yaw), -math.cos(yaw), 0.0]
        forward = [math.cos(yaw), math.sin(yaw), 0.0]
        rot = torch.tensor([right, [0.0, 0.0, -1.0], forward])
        trans = -rot @ torch.tensor([0.0, 0.0, 1.6])
        m = torch.eye(4)
        m[:3, :3] = intrinsic @ rot
        m[:3, 3] = intrinsic @ trans
        mats.append(m)
    lidar2img = torch.stack(mats).unsqueeze(0).repeat(batch_size, 1, 1, 1)
    cam_valid = torch.ones(batch_size, num_cams, dtype=torch.bool)
    return {"lidar2img": lidar2img.to(dtype), "img_shape": img_shape, "cam_valid": cam_valid}


@torch.no_grad()
def postprocess(cls_scores, boxes, score_thr=0.3, max_num=10):
    scores, labels = cls_scores.sigmoid().max(-1)
    keep = scores > score_thr
    results = []
    for s, l, bx, k in zip(scores, labels, boxes, keep):
        s, l, bx = s[k], l[k], bx[k]
        order = s.argsort(descending=True)[:max_num]
        results.append({"scores": s[order], "labels": l[order], "boxes": bx[order]})
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--half", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    dtype = torch.float16 if args.half else torch.float32
    head = Detr3DHead(num_query=32, embed_dims=64, num_layers=3, num_cams=6, num_levels=2).eval()
    head = head.to(dtype)
    feats = [torch.randn(2, 6, 64, 16, 28, dtype=dtype), torch.randn(2, 6, 64, 8, 14, dtype=dtype)]
    metas = make_rig(2, 6, (64, 112), dtype)
    metas["cam_valid"][1, 3] = False
    with torch.no_grad():
        cls_scores, boxes = head(feats, metas)
    dets = postprocess(cls_scores[-1].float(), boxes[-1].float(), score_thr=0.0)
    print("cls", tuple(cls_scores.shape), "boxes", tuple(boxes.shape), "finite", bool(torch.isfinite(boxes).all()))
    print("detections per sample", [len(d["scores"]) for d in dets])
