"""QCNet-style query-centric scene encoder: agent-to-map and agent-to-agent attention.

Every agent attends to the map polylines within ``a2m_radius`` of it and to
the other agents within ``a2a_radius``. Keys carry a relative-pose embedding
(distance, bearing and heading difference in the query agent's frame), so
the encoding does not depend on the scene origin. The original runs on
PyG radius graphs; this port is dense, with padded polylines and agents.

Source: huggingface/transformers PR #27114 (conventions.md §3 item 15), NVIDIA-NeMo/Automodel PR #2658 (item 16); conventions.md §2.3 and §5 item 4.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


def wrap_angle(a):
    return (a + math.pi) % (2 * math.pi) - math.pi


def relative_pose(src_pos, src_head, dst_pos, dst_head):
    rel = src_pos[:, None, :, :] - dst_pos[:, :, None, :]
    cos, sin = torch.cos(dst_head)[:, :, None], torch.sin(dst_head)[:, :, None]
    x = rel[..., 0] * cos + rel[..., 1] * sin
    y = -rel[..., 0] * sin + rel[..., 1] * cos
    dist = torch.hypot(x, y)
    bearing = torch.atan2(y, x)
    dhead = wrap_angle(src_head[:, None, :] - dst_head[:, :, None])
    return torch.stack([dist, bearing, dhead], dim=-1), dist


class FourierEmbedding(nn.Module):
    def __init__(self, in_dim, hidden, num_freq=8):
        super().__init__()
        self.freqs = nn.Parameter(torch.randn(in_dim, num_freq))
        self.mlp = nn.Sequential(nn.Linear(in_dim * (2 * num_freq + 1), hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, hidden))

    def forward(self, x):
        ang = x.unsqueeze(-1) * self.freqs * 2 * math.pi
        feats = torch.cat([ang.cos(), ang.sin(), x.unsqueeze(-1)], dim=-1)
        return self.mlp(feats.flatten(-2))


class AgentMapAttention(nn.Module):
    def __init__(self, hidden, heads, radius):
        super().__init__()
        self.heads, self.radius = heads, radius
        self.to_q = nn.Linear(hidden, hidden)
        self.to_k = nn.Linear(hidden, hidden)
        self.to_v = nn.Linear(hidden, hidden)
        self.to_k_r = nn.Linear(hidden, hidden)
        self.to_v_r = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x_a, x_pl, r_pl2a, dist, pl_valid):
        b, a, d = x_a.shape
        p, h = x_pl.size(1), self.heads
        q = self.to_q(self.norm(x_a)).view(b, a, 1, h, d // h)
        k = (self.to_k(x_pl)[:, None] + self.to_k_r(r_pl2a)).view(b, a, p, h, d // h)
        v = (self.to_v(x_pl)[:, None] + self.to_v_r(r_pl2a)).view(b, a, p, h, d // h)
        scores = (q * k).sum(-1).permute(0, 3, 1, 2) / math.sqrt(d // h)
        neg = torch.finfo(scores.dtype).min
        radius_bias = torch.zeros_like(dist).masked_fill(dist > self.radius, neg)
        pad_bias = torch.zeros_like(dist).masked_fill(~pl_valid[:, None, :], neg)
        attn_bias = (radius_bias + pad_bias).clamp(min=neg)
        weights = (scores + attn_bias[:, None]).softmax(dim=-1)
        agg = torch.einsum("bhap,baphc->bahc", weights, v).reshape(b, a, d)
        return x_a + self.out(agg)


class QCNetEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden
        self.agent_emb = FourierEmbedding(4, d)
        self.pt_emb = nn.Sequential(nn.Linear(4, d), nn.ReLU(), nn.Linear(d, d))
        self.r_a2m = FourierEmbedding(3, d)
        self.r_a2a = FourierEmbedding(3, d)
        self.a2m = AgentMapAttention(d, cfg.heads, cfg.a2m_radius)
        self.a2a = nn.MultiheadAttention(d, cfg.heads, batch_first=True)
        self.a2a_rel = nn.Linear(d, d)
        self.decoder = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, cfg.modes * (cfg.future * 2 + 1)))

    def encode_map(self, pl_points, pt_valid):
        center = (pl_points * pt_valid[..., None]).sum(2) / pt_valid.sum(2, keepdim=True).clamp(min=1)
        seg = torch.diff(pl_points, dim=2, prepend=pl_points[:, :, :1])
        heading = torch.atan2(seg[..., 1], seg[..., 0])
        feats = torch.cat([pl_points - center[:, :, None], heading.cos()[..., None], heading.sin()[..., None]], dim=-1)
        x = self.pt_emb(feats).masked_fill(~pt_valid[..., None], float("-inf")).amax(dim=2)
        pl_valid = pt_valid.any(dim=2)
        x = x.masked_fill(~pl_valid[..., None], 0.0)
        return x, center, heading[:, :, 0], pl_valid

    def forward(self, batch):
        pos, head, vel, a_valid = batch["agent_pos"], batch["agent_heading"], batch["agent_vel"], batch["agent_valid"]
        x_a = self.agent_emb(torch.cat([vel.norm(dim=-1, keepdim=True), head.cos()[..., None], head.sin()[..., None], batch["agent_len"][..., None]], -1))
        x_pl, pl_center, pl_head, pl_valid = self.encode_map(batch["pl_points"], batch["pt_valid"])
        r_pl2a, d_pl2a = relative_pose(pl_center, pl_head, pos, head)
        x_a = self.a2m(x_a, x_pl, self.r_a2m(r_pl2a), d_pl2a, pl_valid)
        r_a2a, d_a2a = relative_pose(pos, head, pos, head)
        ctx = self.a2a_rel(self.r_a2a(r_a2a).mean(dim=2))
        a2a_mask = (d_a2a > self.cfg.a2a_radius) | ~a_valid[:, None, :]
        a2a_mask = a2a_mask.repeat_interleave(self.cfg.heads, dim=0)
        x_a = x_a + self.a2a(x_a + ctx, x_a + ctx, x_a, attn_mask=a2a_mask, need_weights=False)[0]
        out = self.decoder(x_a).view(*x_a.shape[:2], self.cfg.modes, -1)
        return out[..., :-1].reshape(*out.shape[:3], self.cfg.future, 2).cumsum(-2), out[..., -1]


def make_scene(num_polylines, num_agents=4, points_per_pl=6, far=(0.0, 0.0), seed=0):
    g = torch.Generator().manual_seed(seed)
    b, p = len(num_polylines), max(max(num_polylines), 1)
    start = torch.randn(b, p, 1, 2, generator=g) * 30
    direction = torch.randn(b, p, 1, 2, generator=g)
    pl_points = start + direction * torch.arange(points_per_pl).view(1, 1, -1, 1) * 2
    pt_valid = (torch.arange(p)[None, :] < torch.tensor(num_polylines)[:, None])[..., None].expand(-1, -1, points_per_pl).clone()
    pl_points = pl_points.masked_fill(~pt_valid[..., None], 0.0)
    agent_pos = torch.randn(b, num_agents, 2, generator=g) * 20 + torch.tensor(far)
    return {
        "agent_pos": agent_pos, "agent_heading": torch.rand(b, num_agents, generator=g) * 6.28 - 3.14,
        "agent_vel": torch.randn(b, num_agents, 2, generator=g) * 5, "agent_len": torch.rand(b, num_agents, generator=g) * 4 + 1,
        "agent_valid": torch.ones(b, num_agents, dtype=torch.bool), "pl_points": pl_points, "pt_valid": pt_valid,
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = SimpleNamespace(hidden=64, heads=4, a2m_radius=50.0, a2a_radius=60.0, modes=3, future=8)
    model = QCNetEncoder(cfg)
    scene = make_scene([6, 4], num_agents=4)
    scene_far = make_scene([0], num_agents=3, far=(320.0, -140.0), seed=1)
    for name, batch in (("urban", scene), ("depot", scene_far)):
        traj, logits = model(batch)
        target = torch.randn_like(traj[:, :, 0])
        ade = (traj - target[:, :, None]).norm(dim=-1).mean(-1)
        loss = ade.min(-1).values.mean() + F.cross_entropy(logits.flatten(0, 1), ade.argmin(-1).flatten())
        loss.backward()
        print(f"{name}: traj {tuple(traj.shape)} loss {loss.item():.4f}")
