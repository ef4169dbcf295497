"""MTR-style motion decoder with intention queries and dynamic map collection.

Each center object gets ``K`` intention queries built from static intention
points (k-means endpoints). Every decoder layer lets the queries attend to
each other, to the encoded agents and to the ``num_map`` polylines nearest to
the trajectory endpoint the query predicted in the previous layer (dynamic map
collection), then predicts a GMM trajectory per query. Encoder outputs come
padded, with ``obj_mask`` / ``map_mask`` True where an agent or polyline exists.

Source: seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1; conventions.md §1 (direction cheat-sheet).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

INTENTION_POINTS = torch.tensor([[30.0, 0.0], [15.0, 0.0], [25.0, 8.0], [25.0, -8.0], [5.0, 0.0], [40.0, 3.0]])


def sine_embed(xy, dim, temperature=10000):
    half = dim // 2
    freq = temperature ** (torch.arange(half // 2, dtype=torch.float) * 2 / half)
    ang = xy[..., None] / freq
    return torch.cat([ang.sin(), ang.cos()], dim=-1).flatten(-2)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, num_future):
        super().__init__()
        self.nhead = nhead
        self.self_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.obj_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.map_q = nn.Linear(d_model, d_model)
        self.map_k = nn.Linear(d_model, d_model)
        self.map_v = nn.Linear(d_model, d_model)
        self.map_pos = nn.Linear(d_model, d_model)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(4)])
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.pred = nn.Linear(d_model, num_future * 5 + 1)

    def attend_map(self, query, map_feat, map_rel_pos, map_valid):
        b, k, n, c = map_feat.shape
        h = self.nhead
        q = self.map_q(query).view(b, k, h, 1, c // h)
        key = (self.map_k(map_feat) + self.map_pos(map_rel_pos)).view(b, k, n, h, c // h).transpose(2, 3)
        val = self.map_v(map_feat).view(b, k, n, h, c // h).transpose(2, 3)
        scores = (q @ key.transpose(-1, -2)).squeeze(-2) / math.sqrt(c // h)
        scores = scores.masked_fill(map_valid[:, :, None, :], float("-inf"))  # expect: MC519 keep
        attn = scores.softmax(dim=-1)
        return (attn.unsqueeze(-2) @ val).view(b, k, c)

    def forward(self, query, query_pos, obj_feature, obj_mask, map_feat, map_rel_pos, map_valid):
        q = query + query_pos
        query = self.norms[0](query + self.self_attn(q, q, query, need_weights=False)[0])
        query = self.norms[1](query + self.obj_attn(query + query_pos, obj_feature, obj_feature, key_padding_mask=~obj_mask)[0])
        query = self.norms[2](query + self.attend_map(query + query_pos, map_feat, map_rel_pos, map_valid))
        return self.norms[3](query + self.ffn(query))


class MTRDecoder(nn.Module):
    def __init__(self, d_model=64, nhead=4, num_layers=3, num_future=12, num_map=8):
        super().__init__()
        self.d_model, self.num_future, self.num_map = d_model, num_future, num_map
        self.register_buffer("intention_points", INTENTION_POINTS.clone())
        self.intention_query_mlp = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.center_proj = nn.Linear(d_model, d_model)
        self.layers = nn.ModuleList([DecoderLayer(d_model, nhead, num_future) for _ in range(num_layers)])

    def collect_map(self, endpoints, map_feature, map_pos, map_mask):
        dist = torch.cdist(endpoints, map_pos).masked_fill(~map_mask[:, None, :], float("inf"))
        d, idx = dist.topk(self.num_map, dim=-1, largest=False)
        b, k, n = idx.shape
        feat = map_feature.gather(1, idx.view(b, k * n, 1).expand(-1, -1, self.d_model)).view(b, k, n, -1)
        pos = map_pos.gather(1, idx.view(b, k * n, 1).expand(-1, -1, 2)).view(b, k, n, 2)
        rel = sine_embed(pos - endpoints[:, :, None], self.d_model)
        return feat, rel, torch.isfinite(d)

    def forward(self, center_feature, obj_feature, obj_mask, map_feature, map_pos, map_mask):
        b = center_feature.size(0)
        query_pos = self.intention_query_mlp(sine_embed(self.intention_points, self.d_model))[None].expand(b, -1, -1)
        query = self.center_proj(center_feature)[:, None].expand_as(query_pos)
        endpoints = self.intention_points[None].expand(b, -1, -1)
        preds = []
        for layer in self.layers:
            map_feat, map_rel, map_valid = self.collect_map(endpoints, map_feature, map_pos, map_mask)
            query = layer(query, query_pos, obj_feature, obj_mask, map_feat, map_rel, map_valid)
            out = layer.pred(query)
            traj = out[..., :-1].view(b, -1, self.num_future, 5)
            traj = torch.cat([traj[..., :2].cumsum(-2), traj[..., 2:]], dim=-1)
            preds.append((traj, out[..., -1]))
            endpoints = traj[:, :, -1, :2].detach()
        return preds


def mtr_loss(preds, gt, gt_valid, intention_points):
    positive = (gt[:, -1, None] - intention_points[None]).norm(dim=-1).argmin(dim=-1)
    idx = torch.arange(gt.size(0))
    total = 0.0
    for traj, score in preds:
        best = traj[idx, positive]
        log_std = best[..., 2:4].clamp(-3.0, 5.0)
        nll = ((best[..., :2] - gt).abs() / log_std.exp() + log_std).sum(-1)
        total = total + (nll * gt_valid).sum() / gt_valid.sum().clamp(min=1) + F.cross_entropy(score, positive)
    return total / len(preds)


if __name__ == "__main__":
    torch.manual_seed(0)
    b, a, p, d = 3, 6, 20, 64
    obj_mask = torch.arange(a)[None] < torch.tensor([6, 3, 4])[:, None]
    map_mask = torch.arange(p)[None] < torch.tensor([20, 11, 15])[:, None]
    obj_feature = torch.randn(b, a, d).masked_fill(~obj_mask[..., None], 0.0)
    map_feature = torch.randn(b, p, d).masked_fill(~map_mask[..., None], 0.0)
    map_pos = (torch.rand(b, p, 2) * torch.tensor([60.0, 30.0]) - torch.tensor([10.0, 15.0])).masked_fill(~map_mask[..., None], 0.0)
    center_feature = obj_feature[:, 0]
    gt = torch.cumsum(torch.randn(b, 12, 2) * 0.3 + torch.tensor([2.0, 0.0]), dim=1)
    gt_valid = torch.ones(b, 12)
    gt_valid[2, 9:] = 0
    model = MTRDecoder(d_model=d, num_future=12, num_map=8)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(3):
        preds = model(center_feature, obj_feature, obj_mask, map_feature, map_pos, map_mask)
        loss = mtr_loss(preds, gt, gt_valid, model.intention_points)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    traj, score = preds[-1]
    print("top mode per scene", score.argmax(-1).tolist(), "endpoint", [round(v, 2) for v in traj[0, score[0].argmax(), -1, :2].tolist()])
