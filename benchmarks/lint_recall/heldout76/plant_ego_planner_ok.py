"""PlanT-style object-level ego planner.

The scene around the ego vehicle is a set of object tokens (vehicles with
position, yaw, speed and extent; route segments with position, yaw and
length). A [CLS] token and the tokens go through a small Transformer encoder;
a GRU decodes future waypoints from the [CLS] output and the target point,
and an auxiliary head forecasts the other vehicles' next pose. Tokens are
padded to ``max_tokens`` so the deployed graph has static shapes.

Source: conventions.md §2.6 and §5 item 6; §1 (SDPA row).
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

VEHICLE, ROUTE = 0, 1


@dataclass
class PlanTConfig:
    token_dim: int = 6
    hidden: int = 64
    heads: int = 4
    layers: int = 3
    max_tokens: int = 16
    num_waypoints: int = 4
    dropout: float = 0.1
    forecast_bins: dict = field(default_factory=lambda: {"x": 32, "y": 32, "yaw": 16})


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden), nn.Dropout(dropout))

    def forward(self, x, keep):
        b, n, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.ln2(x))


class PlanT(nn.Module):
    def __init__(self, cfg: PlanTConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.tok_emb = nn.Linear(cfg.token_dim, h)
        self.type_emb = nn.Embedding(2, h)
        self.cls_emb = nn.Parameter(torch.zeros(1, 1, h))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([EncoderLayer(h, cfg.heads, cfg.dropout) for _ in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(h)
        self.wp_gru = nn.GRUCell(input_size=4, hidden_size=h)
        self.wp_out = nn.Linear(h, 2)
        self.heads = nn.ModuleDict({k: nn.Linear(h, n) for k, n in cfg.forecast_bins.items()})

    def forward(self, tokens, types, keep, target_point):
        b = tokens.size(0)
        x = self.tok_emb(tokens) + self.type_emb(types)
        x = torch.cat([self.cls_emb.expand(b, -1, -1), x], dim=1)
        keep = torch.cat([keep.new_ones(b, 1), keep], dim=1)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, keep)
        x = self.ln_f(x)
        z = x[:, 0]
        wp = torch.zeros(b, 2, dtype=x.dtype)
        waypoints = []
        for _ in range(self.cfg.num_waypoints):
            z = self.wp_gru(torch.cat([wp, target_point], dim=1), z)
            wp = wp + self.wp_out(z)
            waypoints.append(wp)
        forecasts = {k: head(x[:, 1:]) for k, head in self.heads.items()}
        return torch.stack(waypoints, dim=1), forecasts


def tokenize_frame(vehicles, route, max_tokens):
    objs = torch.cat([vehicles, route], dim=0)[:max_tokens]
    types = torch.cat([torch.full((len(vehicles),), VEHICLE), torch.full((len(route),), ROUTE)])[:max_tokens]
    n = objs.size(0)
    tokens = F.pad(objs, (0, 0, 0, max_tokens - n))
    types = F.pad(types, (0, max_tokens - n), value=VEHICLE)
    keep = torch.arange(max_tokens) < n
    return tokens, types, keep


def collate_frames(frames, max_tokens):
    parts = [tokenize_frame(f["vehicles"], f["route"], max_tokens) for f in frames]
    tokens, types, keep = (torch.stack(p) for p in zip(*parts))
    target = torch.stack([f["target_point"] for f in frames])
    return tokens, types, keep, target


def training_loss(model, batch, gt_waypoints, gt_forecast):
    tokens, types, keep, target = batch
    wps, forecasts = model(tokens, types, keep, target)
    loss = F.l1_loss(wps, gt_waypoints)
    vehicle = keep & (types == VEHICLE)
    for name, logits in forecasts.items():
        labels = gt_forecast[name].masked_fill(~vehicle, -100)
        loss = loss + 0.2 * F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)
    return loss


@torch.no_grad()
def plan(model, frame):
    model.eval()
    tokens, types, keep, target = collate_frames([frame], model.cfg.max_tokens)
    waypoints, forecasts = model(tokens, types, keep, target)
    return waypoints[0], {k: v[0, keep[0]].argmax(-1) for k, v in forecasts.items()}


def random_frame(num_vehicles, num_route, g):
    vehicles = torch.cat([torch.randn(num_vehicles, 4, generator=g) * 10, torch.rand(num_vehicles, 2, generator=g) * 4], dim=1)
    route = torch.cat([torch.randn(num_route, 3, generator=g) * 20, torch.rand(num_route, 1, generator=g) * 30, torch.zeros(num_route, 2)], dim=1)
    return {"vehicles": vehicles, "route": route, "target_point": torch.randn(2, generator=g) * 30}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = PlanTConfig()
    model = PlanT(cfg)
    for step in range(3):
        frame = random_frame(num_vehicles=3 + step, num_route=2, g=g)
        waypoints, forecast = plan(model, frame)
        print(f"tick {step}: waypoints {[tuple(round(v, 2) for v in wp) for wp in waypoints.tolist()]}")
        print(f"         forecast x-bins {forecast['x'].tolist()}")
