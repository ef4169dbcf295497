"""Spatial attention over a fixed road-sensor graph for traffic forecasting, with sensor outages.

Source: the seed article on `masked_fill_` (its section on model buffers: a mask registered
with `register_buffer` has no grad, so it "suits in-place `.masked_fill_()`, e.g. updating the
mask dynamically", with `self.mask.masked_fill_(...)` inside `forward`). The k-hop adjacency
bias is a buffer, and each call's broken sensors are filled into it in place: they stay masked
for every later batch and in the saved state_dict.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def k_hop_reachability(adj: Tensor, k: int) -> Tensor:
    """(N, N) bool: j is within k hops of i (self included)."""
    n = adj.shape[0]
    reach = torch.eye(n, dtype=torch.bool) | adj.bool()
    step = reach.clone()
    for _ in range(k - 1):
        step = (step.float() @ reach.float()) > 0
    return step


class SpatialAttention(nn.Module):
    def __init__(self, adj: Tensor, dim: int = 64, heads: int = 4, hops: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        reach = k_hop_reachability(adj, hops)
        self.register_buffer("adj_bias", torch.zeros(reach.shape).masked_fill(~reach, -torch.inf))

    def forward(self, x: Tensor, sensor_ok: Tensor) -> Tensor:
        """x: (B, T, N, dim) node features; sensor_ok: (N,) bool, False for sensors down in this window."""
        b, t, n, d = x.shape
        self.adj_bias.masked_fill_(~sensor_ok[None, :], -torch.inf)  # expect: MC524 buffer
        q, k, v = self.qkv(x).view(b * t, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.adj_bias)
        return self.proj(out.transpose(1, 2).reshape(b, t, n, d))


class TrafficForecaster(nn.Module):
    def __init__(self, adj: Tensor, in_feats: int = 2, dim: int = 64, horizon: int = 12):
        super().__init__()
        self.inp = nn.Linear(in_feats, dim)
        self.node_emb = nn.Parameter(torch.randn(adj.shape[0], dim) * 0.1)
        self.spatial = SpatialAttention(adj, dim)
        self.temporal = nn.GRU(dim, dim, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, horizon)

    def forward(self, x: Tensor, sensor_ok: Tensor) -> Tensor:
        """x: (B, T, N, in_feats) speed / occupancy; readings of broken sensors are zero."""
        h = self.inp(x) + self.node_emb
        h = h + self.spatial(self.norm(h), sensor_ok)
        b, t, n, d = h.shape
        _, last = self.temporal(h.permute(0, 2, 1, 3).reshape(b * n, t, d))
        return self.out(last[-1]).view(b, n, -1)


def masked_mae(pred: Tensor, target: Tensor, sensor_ok: Tensor) -> Tensor:
    w = sensor_ok[None, :, None].to(pred.dtype).expand_as(pred)
    return ((pred - target).abs() * w).sum() / w.sum().clamp(min=1.0)


if __name__ == "__main__":
    torch.manual_seed(0)
    n = 8
    adj = torch.zeros(n, n)
    idx = torch.arange(n - 1)
    adj[idx, idx + 1] = adj[idx + 1, idx] = 1.0  # a corridor of 8 sensors
    model = TrafficForecaster(adj).eval()
    fresh = TrafficForecaster(adj).eval()
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(4, 12, n, 2)
    all_ok = torch.ones(n, dtype=torch.bool)
    outage = all_ok.clone()
    outage[[2, 3, 4]] = False
    with torch.no_grad():
        model(x * outage[None, None, :, None], outage)  # one batch with three sensors down
        after = model(x, all_ok)
        before = fresh(x, all_ok)
    print("-inf cells in adj_bias:", torch.isneginf(model.spatial.adj_bias).sum().item(),
          "(fresh model:", torch.isneginf(fresh.spatial.adj_bias).sum().item(), ")")
    print("all sensors up, max |after outage - fresh|:", (after - before).abs().max().item())
