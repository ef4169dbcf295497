"""Motion Transformer (MTR) style multi-modal trajectory prediction for the centre agent.

Agents carry ``num_past`` steps of (x, y, vx, vy) with a per-step ``obj_trajs_mask``, map
polylines ``num_points`` points of (x, y, dx, dy) with ``map_polylines_mask``; both are padded per
scene. The layout follows sshaoshuai/MTR: ``PointNetPolylineEncoder`` (shared pre-MLP, max-pool
over the valid points), ``gen_sineembed_for_position``, ``MTREncoder.apply_global_attn`` over the
agent and map tokens with DETR-style ``TransformerEncoderLayer`` s on ``nn.MultiheadAttention``,
a decoder of learned intention queries, and the winner-takes-all regression with a mode score.

Source: conventions.md §1 (nn.MultiheadAttention row, direction cheat-sheet) and §5 item 1,
seed self_attention_mask_guide.txt §2
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MTRConfig:
    d_model: int = 64
    num_heads: int = 4
    num_attn_layers: int = 2
    num_past: int = 10
    num_future: int = 12
    max_agents: int = 8
    max_polylines: int = 10
    num_points: int = 6
    num_motion_modes: int = 6


def build_mlps(c_in, mlp_channels, ret_before_act=False):
    layers = []
    for k, c_out in enumerate(mlp_channels):
        if k == len(mlp_channels) - 1 and ret_before_act:
            layers.append(nn.Linear(c_in, c_out))
        else:
            layers.extend([nn.Linear(c_in, c_out, bias=False), nn.LayerNorm(c_out), nn.ReLU()])
        c_in = c_out
    return nn.Sequential(*layers)


def gen_sineembed_for_position(pos_tensor, hidden_dim=64):
    half = hidden_dim // 2
    scale = 2 * math.pi
    dim_t = torch.arange(half, dtype=torch.float32, device=pos_tensor.device)
    dim_t = 10000 ** (2 * (dim_t // 2) / half)
    pos_x = pos_tensor[..., 0, None] * scale / dim_t
    pos_y = pos_tensor[..., 1, None] * scale / dim_t
    pos_x = torch.stack((pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()), dim=-1).flatten(-2)
    pos_y = torch.stack((pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()), dim=-1).flatten(-2)
    return torch.cat((pos_y, pos_x), dim=-1)


class PointNetPolylineEncoder(nn.Module):
    def __init__(self, in_channels, hidden_dim, out_channels):
        super().__init__()
        self.pre_mlps = build_mlps(in_channels, [hidden_dim, hidden_dim])
        self.mlps = build_mlps(hidden_dim * 2, [hidden_dim, hidden_dim])
        self.out_mlps = build_mlps(hidden_dim, [hidden_dim, out_channels], ret_before_act=True)

    def forward(self, polylines, polylines_mask):
        batch_size, num_polylines, num_points, _ = polylines.shape
        feature_valid = self.pre_mlps(polylines[polylines_mask])
        features = polylines.new_zeros(
            batch_size, num_polylines, num_points, feature_valid.shape[-1]
        )
        features[polylines_mask] = feature_valid
        pooled = features.max(dim=2)[0]
        features = torch.cat((features, pooled[:, :, None, :].expand(-1, -1, num_points, -1)), -1)
        feature_valid = self.mlps(features[polylines_mask])
        features = features.new_zeros(
            batch_size, num_polylines, num_points, feature_valid.shape[-1]
        )
        features[polylines_mask] = feature_valid
        pooled = features.max(dim=2)[0]
        valid_mask = polylines_mask.sum(dim=-1) > 0
        out = pooled.new_zeros(batch_size, num_polylines, self.out_mlps[-1].out_features)
        out[valid_mask] = self.out_mlps(pooled[valid_mask])
        return out


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=256, dropout=0.0):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, src, src_key_padding_mask=None, pos=None):
        q = k = src if pos is None else src + pos
        src2 = self.self_attn(q, k, value=src, key_padding_mask=src_key_padding_mask)[0]
        src = self.norm1(src + src2)
        src2 = self.linear2(F.relu(self.linear1(src)))
        return self.norm2(src + src2)


class MTREncoder(nn.Module):
    def __init__(self, cfg: MTRConfig):
        super().__init__()
        self.agent_polyline_encoder = PointNetPolylineEncoder(5, cfg.d_model, cfg.d_model)
        self.map_polyline_encoder = PointNetPolylineEncoder(4, cfg.d_model, cfg.d_model)
        self.self_attn_layers = nn.ModuleList(
            [
                TransformerEncoderLayer(cfg.d_model, cfg.num_heads)
                for _ in range(cfg.num_attn_layers)
            ]
        )

    def apply_global_attn(self, x, valid_mask, x_pos):
        d_model = x.shape[-1]
        x_t = x.permute(1, 0, 2)
        pos_embedding = gen_sineembed_for_position(x_pos.permute(1, 0, 2), hidden_dim=d_model)
        for layer in self.self_attn_layers:
            x_t = layer(src=x_t, src_key_padding_mask=~valid_mask, pos=pos_embedding)
        return x_t.permute(1, 0, 2)

    def forward(self, batch):
        obj_trajs, obj_trajs_mask = batch["obj_trajs"], batch["obj_trajs_mask"]
        map_polylines, map_polylines_mask = batch["map_polylines"], batch["map_polylines_mask"]
        obj_in = torch.cat((obj_trajs, obj_trajs_mask[..., None].float()), dim=-1)
        obj_feature = self.agent_polyline_encoder(obj_in, obj_trajs_mask)
        map_feature = self.map_polyline_encoder(map_polylines, map_polylines_mask)
        obj_valid_mask = obj_trajs_mask.sum(dim=-1) > 0
        map_valid_mask = map_polylines_mask.sum(dim=-1) > 0
        map_center = (map_polylines[..., :2] * map_polylines_mask[..., None]).sum(2)
        map_center = map_center / map_polylines_mask.sum(-1, keepdim=True).clamp(min=1)
        global_token_feature = torch.cat((obj_feature, map_feature), dim=1)
        global_token_mask = torch.cat((obj_valid_mask, map_valid_mask), dim=1)
        global_token_pos = torch.cat((obj_trajs[:, :, -1, :2], map_center), dim=1)
        global_token_feature = self.apply_global_attn(
            global_token_feature, global_token_mask, global_token_pos
        )
        return global_token_feature, global_token_mask


class MotionTransformer(nn.Module):
    def __init__(self, cfg: MTRConfig):
        super().__init__()
        self.cfg = cfg
        self.context_encoder = MTREncoder(cfg)
        self.intention_query = nn.Parameter(torch.randn(cfg.num_motion_modes, cfg.d_model) * 0.1)
        self.cross_attn = nn.MultiheadAttention(cfg.d_model, cfg.num_heads)
        self.query_norm = nn.LayerNorm(cfg.d_model)
        self.motion_reg_head = build_mlps(cfg.d_model * 2, [cfg.d_model, cfg.num_future * 2], True)
        self.motion_cls_head = build_mlps(cfg.d_model * 2, [cfg.d_model, 1], True)

    def forward(self, batch):
        feature, mask = self.context_encoder(batch)
        center = feature[:, 0]
        B = feature.shape[0]
        query = self.intention_query[:, None, :].expand(-1, B, -1) + center[None]
        memory = feature.permute(1, 0, 2)
        attn_out = self.cross_attn(query, memory, memory, key_padding_mask=~mask)[0]
        query = self.query_norm(query + attn_out).permute(1, 0, 2)
        query = torch.cat((query, center[:, None].expand_as(query)), dim=-1)
        pred_trajs = self.motion_reg_head(query).view(B, -1, self.cfg.num_future, 2)
        pred_scores = self.motion_cls_head(query).squeeze(-1)
        return pred_trajs.cumsum(dim=2), pred_scores


def get_loss(pred_trajs, pred_scores, gt_trajs):
    dist = (pred_trajs - gt_trajs[:, None]).norm(dim=-1).mean(dim=-1)
    nearest = dist.argmin(dim=-1)
    reg = dist.gather(1, nearest[:, None]).mean()
    return reg + F.cross_entropy(pred_scores, nearest)


def make_scenes(n, cfg, gen):
    A, P, T = cfg.max_agents, cfg.max_polylines, cfg.num_past
    obj_trajs = torch.zeros(n, A, T, 4)
    obj_trajs_mask = torch.zeros(n, A, T, dtype=torch.bool)
    map_polylines = torch.zeros(n, P, cfg.num_points, 4)
    map_polylines_mask = torch.zeros(n, P, cfg.num_points, dtype=torch.bool)
    gt = torch.zeros(n, cfg.num_future, 2)
    for i in range(n):
        heading = float(torch.rand(1, generator=gen)) * 2 * math.pi
        speed = 0.05 + 0.1 * float(torch.rand(1, generator=gen))
        turn = 0.08 * float(torch.randn(1, generator=gen))
        for a in range(int(torch.randint(2, A + 1, (1,), generator=gen))):
            h = heading if a == 0 else heading + float(torch.randn(1, generator=gen))
            start = torch.zeros(2) if a == 0 else torch.randn(2, generator=gen)
            steps = torch.arange(-T + 1, 1, dtype=torch.float32)[:, None]
            vel = speed * torch.tensor([math.cos(h), math.sin(h)])
            obj_trajs[i, a] = torch.cat((start + steps * vel, vel.expand(T, 2)), dim=-1)
            obj_trajs_mask[i, a, int(torch.randint(0, 3, (1,), generator=gen)) :] = True
        for p in range(int(torch.randint(3, P + 1, (1,), generator=gen))):
            h = heading + turn * p
            pts = torch.arange(cfg.num_points, dtype=torch.float32)[:, None] * 0.3
            d = torch.tensor([math.cos(h), math.sin(h)])
            map_polylines[i, p] = torch.cat(
                (0.3 * p * d + pts * d, d.expand(cfg.num_points, 2)), -1
            )
            map_polylines_mask[
                i, p, : int(torch.randint(3, cfg.num_points + 1, (1,), generator=gen))
            ] = True
        angles = heading + turn * torch.arange(1, cfg.num_future + 1, dtype=torch.float32)
        gt[i] = speed * torch.stack((angles.cos(), angles.sin()), dim=-1).cumsum(dim=0)
    return {
        "obj_trajs": obj_trajs,
        "obj_trajs_mask": obj_trajs_mask,
        "map_polylines": map_polylines,
        "map_polylines_mask": map_polylines_mask,
        "center_gt_trajs": gt,
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = MTRConfig()
    gen = torch.Generator().manual_seed(0)
    train, test = make_scenes(512, cfg, gen), make_scenes(128, cfg, gen)
    model = MotionTransformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(6):
        for start in range(0, 512, 32):
            batch = {k: v[start : start + 32] for k, v in train.items()}
            loss = get_loss(*model(batch), batch["center_gt_trajs"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        pred_trajs, _ = model(test)
        err = (pred_trajs - test["center_gt_trajs"][:, None]).norm(dim=-1)
        print(
            f"minADE {err.mean(-1).min(-1)[0].mean():.4f} "
            f"minFDE {err[..., -1].min(-1)[0].mean():.4f}"
        )
