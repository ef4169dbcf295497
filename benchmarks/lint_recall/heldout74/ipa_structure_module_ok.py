"""Structure module with Invariant Point Attention (AlphaFold 2, supplement Alg. 20-22).

Single and pair representations from a folding trunk are turned into backbone
frames: every block runs IPA (scalar, point and pair terms), a transition, and a
backbone update from a quaternion. Rotations are detached between blocks. The
batch holds proteins of different lengths padded to a common length; training
uses a clamped distance-matrix loss on C-alpha positions and a pLDDT-like head.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md §3 items 5 and 22); conventions.md §2.3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def quat_to_rot(quat):
    a, b, c, d = quat.unbind(-1)
    rot = [
        a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c),
        2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b),
        2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d,
    ]
    return torch.stack(rot, dim=-1).view(quat.shape[:-1] + (3, 3))


def apply_frames(rots, trans, pts):
    return torch.einsum("...ij,...pj->...pi", rots, pts) + trans[..., None, :]


def invert_apply_frames(rots, trans, pts):
    return torch.einsum("...ji,...pj->...pi", rots, pts - trans[..., None, :])


class InvariantPointAttention(nn.Module):
    def __init__(self, c_s, c_z, c_hidden=16, no_heads=4, no_qk_points=4, no_v_points=8, eps=1e-8):
        super().__init__()
        self.c_hidden, self.no_heads, self.eps = c_hidden, no_heads, eps
        self.no_qk_points, self.no_v_points = no_qk_points, no_v_points
        self.linear_q = nn.Linear(c_s, c_hidden * no_heads)
        self.linear_kv = nn.Linear(c_s, 2 * c_hidden * no_heads)
        self.linear_q_points = nn.Linear(c_s, no_heads * no_qk_points * 3)
        self.linear_kv_points = nn.Linear(c_s, no_heads * (no_qk_points + no_v_points) * 3)
        self.linear_b = nn.Linear(c_z, no_heads)
        self.head_weights = nn.Parameter(torch.full((no_heads,), 0.541324854612918))
        self.linear_out = nn.Linear(no_heads * (c_z + c_hidden + no_v_points * 4), c_s)

    def forward(self, s, z, rots, trans, res_mask):
        B, N, _ = s.shape
        H, C = self.no_heads, self.c_hidden
        pair = res_mask[:, :, None] & res_mask[:, None, :]
        z = z * pair[..., None]
        q = self.linear_q(s).view(B, N, H, C)
        k, v = self.linear_kv(s).view(B, N, H, 2 * C).split(C, dim=-1)
        q_pts = apply_frames(rots, trans, self.linear_q_points(s).view(B, N, -1, 3))
        q_pts = q_pts.view(B, N, H, self.no_qk_points, 3)
        kv_pts = apply_frames(rots, trans, self.linear_kv_points(s).view(B, N, -1, 3))
        k_pts, v_pts = kv_pts.view(B, N, H, -1, 3).split([self.no_qk_points, self.no_v_points], dim=-2)
        a = torch.einsum("bihc,bjhc->bhij", q, k) * math.sqrt(1.0 / (3 * C))
        a = a + math.sqrt(1.0 / 3) * self.linear_b(z).permute(0, 3, 1, 2)
        pt_att = ((q_pts[:, :, None] - k_pts[:, None, :]) ** 2).sum(-1)
        head_weights = F.softplus(self.head_weights) * math.sqrt(1.0 / (3 * (self.no_qk_points * 9.0 / 2)))
        pt_att = (pt_att * head_weights[:, None]).sum(-1) * (-0.5)
        a = a + math.sqrt(1.0 / 3) * pt_att.permute(0, 3, 1, 2)
        a = a.masked_fill(~res_mask[:, None, None, :], float("-inf"))
        a = torch.softmax(a, dim=-1)
        o = torch.einsum("bhij,bjhc->bihc", a, v).reshape(B, N, H * C)
        o_pt = torch.einsum("bhij,bjhpx->bihpx", a, v_pts).reshape(B, N, -1, 3)
        o_pt = invert_apply_frames(rots, trans, o_pt)
        o_pt_norm = torch.sqrt((o_pt ** 2).sum(-1) + self.eps)
        o_pair = torch.einsum("bhij,bijc->bihc", a, z).reshape(B, N, -1)
        return self.linear_out(torch.cat([o, o_pt.reshape(B, N, -1), o_pt_norm, o_pair], dim=-1))


class StructureModule(nn.Module):
    def __init__(self, c_s=32, c_z=16, no_blocks=3, dropout=0.1, no_bins=10):
        super().__init__()
        self.no_blocks = no_blocks
        self.layer_norm_s = nn.LayerNorm(c_s)
        self.layer_norm_z = nn.LayerNorm(c_z)
        self.linear_in = nn.Linear(c_s, c_s)
        self.ipa = InvariantPointAttention(c_s, c_z)
        self.ipa_dropout = nn.Dropout(dropout)
        self.layer_norm_ipa = nn.LayerNorm(c_s)
        self.transition = nn.Sequential(nn.Linear(c_s, c_s), nn.ReLU(), nn.Linear(c_s, c_s), nn.ReLU(),
                                        nn.Linear(c_s, c_s))
        self.layer_norm_tr = nn.LayerNorm(c_s)
        self.bb_update = nn.Linear(c_s, 6)
        self.plddt = nn.Sequential(nn.LayerNorm(c_s), nn.Linear(c_s, c_s), nn.ReLU(), nn.Linear(c_s, no_bins))

    def forward(self, s, z, res_mask):
        s = self.linear_in(self.layer_norm_s(s))
        z = self.layer_norm_z(z)
        B, N, _ = s.shape
        rots = torch.eye(3, device=s.device).expand(B, N, 3, 3)
        trans = s.new_zeros(B, N, 3)
        for i in range(self.no_blocks):
            s = s + self.ipa(s, z, rots, trans, res_mask)
            s = self.layer_norm_ipa(self.ipa_dropout(s))
            s = self.layer_norm_tr(s + self.transition(s))
            update = self.bb_update(s)
            quat = torch.cat([torch.ones_like(update[..., :1]), update[..., :3]], dim=-1)
            quat = quat / quat.norm(dim=-1, keepdim=True)
            trans = torch.einsum("...ij,...j->...i", rots, update[..., 3:]) + trans
            rots = rots @ quat_to_rot(quat)
            if i < self.no_blocks - 1:
                rots = rots.detach()
        return {"single": s, "positions": trans * 10.0, "plddt_logits": self.plddt(s)}


def distance_loss(pred, true, res_mask, clamp=10.0):
    pair = (res_mask[:, :, None] & res_mask[:, None, :]).float()
    d_pred = torch.cdist(pred, pred)
    d_true = torch.cdist(true, true)
    err = (d_pred - d_true).abs().clamp(max=clamp) * pair
    return (err.sum(dim=(1, 2)) / pair.sum(dim=(1, 2)).clamp(min=1.0)).mean()


def lddt_bins(pred, true, res_mask, no_bins=10, cutoff=15.0):
    pair = res_mask[:, :, None] & res_mask[:, None, :] & ~torch.eye(pred.shape[1], dtype=torch.bool)
    d_true, d_pred = torch.cdist(true, true), torch.cdist(pred, pred)
    close = pair & (d_true < cutoff)
    diff = (d_true - d_pred).abs()
    score = sum((diff < t).float() for t in (0.5, 1.0, 2.0, 4.0)) / 4.0
    lddt = (score * close).sum(-1) / close.sum(-1).clamp(min=1)
    return (lddt * no_bins).long().clamp(max=no_bins - 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    lengths = torch.tensor([9, 6])
    N = int(lengths.max())
    res_mask = torch.arange(N)[None, :] < lengths[:, None]
    single, pair = torch.randn(2, N, 32), torch.randn(2, N, N, 16)
    true_ca = torch.cumsum(F.normalize(torch.randn(2, N, 3), dim=-1) * 3.8, dim=1)
    model = StructureModule()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        out = model(single, pair, res_mask)
        loss = distance_loss(out["positions"], true_ca, res_mask)
        bins = lddt_bins(out["positions"].detach(), true_ca, res_mask)
        ce = F.cross_entropy(out["plddt_logits"][res_mask], bins[res_mask])
        opt.zero_grad()
        (loss + 0.01 * ce).backward()
        opt.step()
        print(f"step {step} distance {loss.item():.4f} plddt {ce.item():.4f}")
