"""Spatial-temporal attention for traffic speed forecasting, ported from MXNet Gluon to PyTorch.

The Gluon model (ASTGCN / GMAN family) attends over the road-sensor graph at every time step,
biased by a learned sensor-to-sensor table restricted to the adjacency with self-loops, then
attends over the past time steps of each sensor, and is trained with the masked MAE that
ignores missing readings. `self.params.get(...)` became `nn.Parameter`, `F.where` became
`masked_fill`, and the (batch, time, node, channel) layout of the Gluon code was kept.

Source: seed masked_fill_inplace.txt (梯度计算风险), conventions.md §1 (SDPA row).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def adjacency_from_edges(num_nodes, edges):
    adj = torch.eye(num_nodes, dtype=torch.bool)
    for i, j in edges:
        adj[i, j] = adj[j, i] = True
    return adj


def masked_mae(pred, target, null_val=float("nan")):
    valid = ~torch.isnan(target) if null_val != null_val else target != null_val
    err = (pred - torch.nan_to_num(target)).abs()
    return torch.where(valid, err, torch.zeros_like(err)).sum() / valid.sum().clamp(min=1)


class SpatialAttention(nn.Module):
    def __init__(self, num_nodes, channels):
        super().__init__()
        self.query = nn.Linear(channels, channels)
        self.key = nn.Linear(channels, channels)
        self.value = nn.Linear(channels, channels)
        self.graph_bias = nn.Parameter(torch.zeros(num_nodes, num_nodes))

    def forward(self, x, adj):
        # x: (batch, time, node, channel)
        scores = torch.einsum("btnc,btmc->btnm", self.query(x), self.key(x)) / x.shape[-1] ** 0.5
        big_neg = torch.finfo(scores.dtype).min
        bias = self.graph_bias.masked_fill(adj == 0, big_neg)
        weights = torch.softmax(scores + bias, dim=-1)
        return torch.einsum("btnm,btmc->btnc", weights, self.value(x))


class TemporalAttention(nn.Module):
    def __init__(self, channels, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(channels, 3 * channels)

    def forward(self, x, observed):
        b, t, n, c = x.shape
        h = x.permute(0, 2, 1, 3).reshape(b * n, t, c)
        q, k, v = self.qkv(h).view(b * n, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        past = torch.ones(t, t, dtype=torch.bool).tril()
        seen = observed.permute(0, 2, 1).reshape(b * n, 1, 1, t) | torch.eye(t, dtype=torch.bool)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=past & seen)
        return out.transpose(1, 2).reshape(b, n, t, c).permute(0, 2, 1, 3)


class STAttNet(nn.Module):
    def __init__(self, num_nodes, edges, channels=8, horizon=3):
        super().__init__()
        self.register_buffer("adj", adjacency_from_edges(num_nodes, edges))
        self.embed = nn.Linear(2, channels)
        self.spatial = SpatialAttention(num_nodes, channels)
        self.temporal = TemporalAttention(channels)
        self.out = nn.Linear(channels, horizon)

    def forward(self, speed):
        observed = ~torch.isnan(speed)
        inp = torch.stack([torch.nan_to_num(speed), observed.to(speed.dtype)], dim=-1)
        x = self.embed(inp)
        x = x + self.spatial(x, self.adj)
        x = x + self.temporal(x, observed)
        return self.out(x[:, -1])


if __name__ == "__main__":
    torch.manual_seed(0)
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 4)]
    model = STAttNet(num_nodes=5, edges=edges)
    speed = torch.randn(4, 6, 5)
    speed[0, 2, 3] = float("nan")
    speed[2, 4, 1] = float("nan")
    target = torch.randn(4, 5, 3)
    target[1, 0, 2] = float("nan")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    try:
        for _ in range(3):
            loss = masked_mae(model(speed), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(round(loss.item(), 4))
        print("training losses:", losses)
    except RuntimeError as err:
        print("training step raised:", err)
    with torch.no_grad():
        pred = model(speed)
    print("eval prediction finite:", bool(torch.isfinite(pred).all()))
    overwritten = model.spatial.graph_bias == torch.finfo(torch.float32).min
    print("graph_bias entries overwritten by eval:", int(overwritten.sum()))
