"""PlanT-style object-level planner for CARLA route following.

The scene is a set of objects around the ego vehicle: other vehicles and route
segments, each a row of (type, x, y, yaw, speed or id, extent).  A [CLS] token
and the object tokens go through a BERT-sized encoder; the [CLS] output is
decoded into future waypoints with a GRU, and every vehicle token predicts its
own future box as an auxiliary task.  Scenes have different numbers of objects,
so they are padded in the collate function.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6);
huggingface/transformers#32195 (section 3 item 25); conventions.md sections 2.9, 5 item 7.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_TYPE, VEHICLE_TYPE, ROUTE_TYPE = 0, 1, 2

config = SimpleNamespace(
    hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
    object_attrs=6, pred_len=4, forecast_bins=16, max_objects=8,
)


class PlanTLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln_attn = nn.LayerNorm(cfg.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.intermediate_size), nn.GELU(),
                                 nn.Linear(cfg.intermediate_size, cfg.hidden_size))
        self.ln_ffn = nn.LayerNorm(cfg.hidden_size)

    def forward(self, hidden_states, attn_bias):
        B, N, D = hidden_states.shape
        qkv = self.qkv(hidden_states).view(B, N, 3, self.n_heads, D // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        hidden_states = self.ln_attn(hidden_states + self.dense(ctx.transpose(1, 2).reshape(B, N, D)))
        return self.ln_ffn(hidden_states + self.ffn(hidden_states))


class PlanT(nn.Module):
    def __init__(self, cfg=config):
        super().__init__()
        self.cfg = cfg
        self.type_emb = nn.Embedding(3, cfg.hidden_size)
        self.attr_proj = nn.Linear(cfg.object_attrs - 1, cfg.hidden_size)
        self.cls_emb = nn.Parameter(torch.zeros(1, 1, cfg.hidden_size))
        self.layers = nn.ModuleList([PlanTLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.wp_gru = nn.GRUCell(2, cfg.hidden_size)
        self.wp_out = nn.Linear(cfg.hidden_size, 2)
        self.forecast = nn.Linear(cfg.hidden_size, 2 * cfg.forecast_bins)

    def forward(self, objects, target_point):
        types = objects[..., 0].long()
        x = self.type_emb(types) + self.attr_proj(objects[..., 1:])
        x = torch.cat([self.cls_emb.expand(x.size(0), -1, -1), x], dim=1)
        attention_mask = (types != PAD_TYPE).long()
        attention_mask = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask], dim=1)
        extended = attention_mask[:, None, None, :].to(dtype=x.dtype)  # expect: MC508 extended
        for layer in self.layers:
            x = layer(x, extended)
        waypoints = self.decode_waypoints(x[:, 0], target_point)
        forecast_logits = self.forecast(x[:, 1:]).unflatten(-1, (2, self.cfg.forecast_bins))
        return waypoints, forecast_logits

    def decode_waypoints(self, z, target_point):
        wp = torch.zeros_like(target_point)
        out = []
        for _ in range(self.cfg.pred_len):
            z = self.wp_gru(wp + target_point, z)
            wp = wp + self.wp_out(z)
            out.append(wp)
        return torch.stack(out, dim=1)


def collate(scenes, max_objects):
    n = min(max(len(s) for s in scenes), max_objects)
    objects = torch.zeros(len(scenes), n, scenes[0].size(-1))
    for i, s in enumerate(scenes):
        objects[i, : min(len(s), n)] = s[:n]
    return objects


def random_scene(n_vehicles, n_route, attrs):
    veh = torch.cat([torch.full((n_vehicles, 1), float(VEHICLE_TYPE)), torch.randn(n_vehicles, attrs - 1)], dim=1)
    route = torch.cat([torch.full((n_route, 1), float(ROUTE_TYPE)), torch.randn(n_route, attrs - 1)], dim=1)
    return torch.cat([veh, route], dim=0)


def plant_loss(model, objects, target_point, gt_waypoints, future_bins):
    waypoints, forecast_logits = model(objects, target_point)
    wp_loss = F.l1_loss(waypoints, gt_waypoints)
    is_vehicle = objects[..., 0].long() == VEHICLE_TYPE
    ce = F.cross_entropy(forecast_logits.flatten(0, 2), future_bins.flatten(), reduction="none")
    ce = ce.view(future_bins.shape).mean(-1)
    forecast_loss = (ce * is_vehicle).sum() / is_vehicle.sum().clamp(min=1)
    return wp_loss + 0.2 * forecast_loss


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PlanT()
    scenes = [random_scene(3, 2, config.object_attrs), random_scene(1, 1, config.object_attrs),
              random_scene(4, 3, config.object_attrs)]
    objects = collate(scenes, config.max_objects)
    B, N = objects.shape[:2]
    target_point = torch.randn(B, 2)
    gt_waypoints = torch.cumsum(torch.randn(B, config.pred_len, 2) * 0.5, dim=1)
    future_bins = torch.randint(config.forecast_bins, (B, N, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss = plant_loss(model, objects, target_point, gt_waypoints, future_bins)
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        wp_batched, _ = model(objects, target_point)
        wp_alone, _ = model(objects[1:2, :2], target_point[1:2])
    print("loss", round(loss.item(), 4), "batch vs alone", (wp_batched[1] - wp_alone[0]).abs().max().item())
