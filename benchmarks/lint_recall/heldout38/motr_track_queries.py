"""MOTR-style end-to-end multi-object tracking with track queries.

Layout after megvii-research/MOTR: a small conv backbone with sine position embeddings, a
DETR decoder whose queries are the concatenation of the track queries carried over from the
previous frame and the learned detect queries, a `ClipMatcher` that assigns ground truth
per frame (track queries keep their identity, detect queries are matched to newborn
objects), and a `QueryInteractionModule` that turns matched detections into the next
frame's track queries. Track slots are padded to `max_tracks` per clip.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md §3 items 5 and 22);
conventions.md §2.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MOTRConfig:
    hidden_dim: int = 64
    nheads: int = 4
    dec_layers: int = 2
    num_queries: int = 6
    max_tracks: int = 3
    image_size: int = 16
    num_frames: int = 4


def sine_position_embedding(h: int, w: int, dim: int) -> torch.Tensor:
    y, x = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    dim_t = 10000 ** (2 * (torch.arange(dim // 4).float()) / (dim // 2))
    pos = [torch.sin(x.flatten()[:, None] / dim_t), torch.cos(x.flatten()[:, None] / dim_t)]
    pos += [torch.sin(y.flatten()[:, None] / dim_t), torch.cos(y.flatten()[:, None] / dim_t)]
    return torch.cat(pos, dim=1)


class QueryAttention(nn.Module):
    def __init__(self, dim: int, nheads: int):
        super().__init__()
        self.nheads = nheads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _heads(self, x):
        B, N, C = x.shape
        return x.view(B, N, self.nheads, C // self.nheads).transpose(1, 2)

    def forward(self, query, key, value, attn_keep=None):
        q, k, v = (
            self._heads(self.q_proj(query)),
            self._heads(self.k_proj(key)),
            self._heads(self.v_proj(value)),
        )
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if attn_keep is not None:
            scores = scores.masked_fill(~attn_keep[:, None], float("-inf"))
        attn = F.softmax(scores, dim=-1)
        return self.out_proj((attn @ v).transpose(1, 2).reshape(query.shape))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: MOTRConfig):
        super().__init__()
        d = cfg.hidden_dim
        self.self_attn = QueryAttention(d, cfg.nheads)
        self.cross_attn = QueryAttention(d, cfg.nheads)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, tgt, query_pos, memory, memory_pos, self_attn_keep):
        q = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, q, tgt, attn_keep=self_attn_keep))
        tgt = self.norm2(tgt + self.cross_attn(tgt + query_pos, memory + memory_pos, memory))
        return self.norm3(tgt + self.ffn(tgt))


class QueryInteractionModule(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.update = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, track_embed, track_keep, det_embed, assignments):
        """assignments: list of (slot, query index) per clip for newborn tracks."""
        track_embed = track_embed.clone()
        track_keep = track_keep.clone()
        for b, pairs in enumerate(assignments):
            for slot, q in pairs:
                track_embed[b, slot] = det_embed[b, q]
                track_keep[b, slot] = True
        return self.norm(track_embed + self.update(track_embed)), track_keep


class MOTR(nn.Module):
    def __init__(self, cfg: MOTRConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_dim
        self.backbone = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, d, 3, padding=1)
        )
        self.register_buffer(
            "memory_pos", sine_position_embedding(cfg.image_size, cfg.image_size, d)
        )
        self.query_embed = nn.Embedding(cfg.num_queries, d)
        self.query_pos = nn.Embedding(cfg.num_queries, d)
        self.track_pos = nn.Embedding(cfg.max_tracks, d)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.class_embed = nn.Linear(d, 1)
        self.bbox_embed = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))
        self.qim = QueryInteractionModule(d)

    def _forward_single_frame(self, frame, track_embed, track_keep):
        B = frame.shape[0]
        memory = self.backbone(frame).flatten(2).transpose(1, 2)
        det = self.query_embed.weight[None].expand(B, -1, -1)
        tgt = torch.cat([track_embed, det], dim=1)
        query_pos = torch.cat([self.track_pos.weight, self.query_pos.weight], dim=0)[None].expand(
            B, -1, -1
        )
        query_keep = torch.cat([track_keep, track_keep.new_ones(B, self.cfg.num_queries)], dim=1)
        attn_keep = query_keep[:, :, None] & query_keep[:, None, :]  # expect: MC507 motr
        for layer in self.layers:
            tgt = layer(tgt, query_pos, memory, self.memory_pos[None], attn_keep)
        logits = self.class_embed(tgt).squeeze(-1)
        boxes = self.bbox_embed(tgt).sigmoid()
        return tgt, logits, boxes


class ClipMatcher:
    """Per-frame targets; tracks keep their object, new objects go to the cheapest free query."""

    def __init__(self, cfg: MOTRConfig):
        self.cfg = cfg

    def match_new(self, det_boxes, gt_boxes, new_ids):
        pairs, used = [], set()
        for obj in new_ids:
            cost = (det_boxes - gt_boxes[obj]).abs().sum(-1)
            for q in cost.argsort().tolist():
                if q not in used:
                    used.add(q)
                    pairs.append((obj, q))
                    break
        return pairs

    def loss(self, logits, boxes, track_keep, slot_obj, gt_boxes, new_pairs):
        T = self.cfg.max_tracks
        cls_target = torch.zeros_like(logits)
        weight = torch.cat([track_keep.float(), torch.ones_like(logits[:, T:])], dim=1)
        box_loss, n_boxes = logits.new_zeros(()), 0
        for b in range(logits.shape[0]):
            for slot in range(T):
                if track_keep[b, slot]:
                    cls_target[b, slot] = 1.0
                    box_loss = (
                        box_loss + (boxes[b, slot] - gt_boxes[b][slot_obj[b][slot]]).abs().sum()
                    )
                    n_boxes += 1
            for obj, q in new_pairs[b]:
                cls_target[b, T + q] = 1.0
                box_loss = box_loss + (boxes[b, T + q] - gt_boxes[b][obj]).abs().sum()
                n_boxes += 1
        cls_loss = F.binary_cross_entropy_with_logits(logits, cls_target, weight=weight)
        return cls_loss + 5.0 * box_loss / max(n_boxes, 1)


def render_clip(cfg: MOTRConfig, generator: torch.Generator):
    """1-3 squares moving at constant speed; boxes are (cx, cy, w, h) in [0, 1]."""
    n = int(torch.randint(1, cfg.max_tracks + 1, (1,), generator=generator))
    start = torch.rand(n, 2, generator=generator) * 0.5 + 0.25
    vel = (torch.rand(n, 2, generator=generator) - 0.5) * 0.12
    size = torch.full((n, 2), 3.0 / cfg.image_size)
    frames, boxes = [], []
    for t in range(cfg.num_frames):
        centre = (start + t * vel).clamp(0.1, 0.9)
        img = torch.zeros(1, cfg.image_size, cfg.image_size)
        for c in centre:
            x0, y0 = int(c[0] * cfg.image_size) - 1, int(c[1] * cfg.image_size) - 1
            img[0, max(y0, 0) : y0 + 3, max(x0, 0) : x0 + 3] = 1.0
        frames.append(img)
        boxes.append(torch.cat([centre, size], dim=1))
    return torch.stack(frames), boxes


def run_clip_batch(model: MOTR, matcher: ClipMatcher, clips):
    cfg = model.cfg
    B = len(clips)
    track_embed = torch.zeros(B, cfg.max_tracks, cfg.hidden_dim)
    track_keep = torch.zeros(B, cfg.max_tracks, dtype=torch.bool)
    slot_obj = [[-1] * cfg.max_tracks for _ in range(B)]
    total, ious = 0.0, []
    for t in range(cfg.num_frames):
        frame = torch.stack([frames[t] for frames, _ in clips])
        gt = [boxes[t] for _, boxes in clips]
        hs, logits, boxes = model._forward_single_frame(frame, track_embed, track_keep)
        new_pairs = []
        for b in range(B):
            tracked = {o for o in slot_obj[b] if o >= 0}
            new_ids = [o for o in range(len(gt[b])) if o not in tracked]
            new_pairs.append(matcher.match_new(boxes[b, cfg.max_tracks :].detach(), gt[b], new_ids))
        total = total + matcher.loss(logits, boxes, track_keep, slot_obj, gt, new_pairs)
        for b in range(B):
            for slot in range(cfg.max_tracks):
                if track_keep[b, slot]:
                    p, g = boxes[b, slot].detach(), gt[b][slot_obj[b][slot]]
                    ious.append(box_iou(p, g))
        assignments = []
        for b in range(B):
            free = [s for s in range(cfg.max_tracks) if slot_obj[b][s] < 0]
            pairs = []
            for (obj, q), slot in zip(new_pairs[b], free):
                slot_obj[b][slot] = obj
                pairs.append((slot, q))
            assignments.append(pairs)
        track_hs, det_hs = hs[:, : cfg.max_tracks], hs[:, cfg.max_tracks :]
        track_embed, track_keep = model.qim(track_hs, track_keep, det_hs, assignments)
    return total / cfg.num_frames, ious


def box_iou(a: torch.Tensor, b: torch.Tensor) -> float:
    a0, a1 = a[:2] - a[2:] / 2, a[:2] + a[2:] / 2
    b0, b1 = b[:2] - b[2:] / 2, b[:2] + b[2:] / 2
    inter = (torch.minimum(a1, b1) - torch.maximum(a0, b0)).clamp(min=0).prod()
    return float(inter / (a[2:].prod() + b[2:].prod() - inter))


def main():
    torch.manual_seed(0)
    cfg = MOTRConfig()
    model = MOTR(cfg)
    matcher = ClipMatcher(cfg)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(60):
        clips = [render_clip(cfg, gen) for _ in range(8)]
        loss, _ = run_clip_batch(model, matcher, clips)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad():
        clips = [render_clip(cfg, torch.Generator().manual_seed(100 + i)) for i in range(8)]
        loss, ious = run_clip_batch(model, matcher, clips)
    print(f"eval loss {loss.item():.3f}; mean track IoU {sum(ious) / max(len(ious), 1):.3f}")


if __name__ == "__main__":
    main()
