"""Global weather/climate emulator over a latitude-longitude grid with sequence parallelism over latitude bands.

The globe is cut into lat-lon patches; each patch token carries several atmospheric variables,
and attention is restricted to patches within a great-circle radius (a fixed neighbourhood bias
built once from the grid). Observations come from polar-orbiting swaths, so at each analysis
time some longitude sectors have no data. Latitude bands are split over sequence-parallel ranks
(each rank's band as queries, all patches as keys); the bands run in a loop in this process
when torch.distributed is not initialised. Training uses bfloat16 autocast.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md §2.3
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GridConfig:
    n_lat: int = 8
    n_lon: int = 16
    variables: int = 4
    dim: int = 32
    heads: int = 4
    depth: int = 2
    radius_deg: float = 50.0
    sp_size: int = 2


def band_ranks(simulated):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated)), simulated


def great_circle_neighbour_bias(cfg):
    lat = torch.linspace(-90 + 90 / cfg.n_lat, 90 - 90 / cfg.n_lat, cfg.n_lat)
    lon = torch.arange(cfg.n_lon) * 360.0 / cfg.n_lon
    la, lo = (t.flatten().deg2rad() for t in torch.meshgrid(lat, lon, indexing="ij"))
    cos_d = la.sin()[:, None] * la.sin()[None] + la.cos()[:, None] * la.cos()[None] * (lo[:, None] - lo[None]).cos()
    dist_deg = cos_d.clamp(-1, 1).acos().rad2deg()
    return torch.zeros_like(dist_deg).masked_fill(dist_deg > cfg.radius_deg, float("-inf"))


class BandAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x_band, x_all, bias_band):
        b, n, d = x_band.shape
        q = self.q(x_band).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x_all).view(b, -1, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias_band.to(q.dtype)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = BandAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x_band, x_all, bias_band):
        h = x_band + self.attn(self.ln1(x_band), self.ln1(x_all), bias_band)
        return h + self.mlp(self.ln2(h))


class GridEmulator(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.variables + 1, cfg.dim)
        self.pos = nn.Parameter(torch.randn(cfg.n_lat * cfg.n_lon, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.depth))
        self.head = nn.Linear(cfg.dim, cfg.variables)
        self.register_buffer("neighbour_bias", great_circle_neighbour_bias(cfg), persistent=False)

    def forward(self, fields, observed):
        x = torch.cat([fields * observed[None, :, None], observed[None, :, None].expand(fields.shape[0], -1, 1)], -1)
        x = self.embed(x) + self.pos
        bias = self.neighbour_bias.masked_fill_(~observed[None, :], float("-inf"))  # expect: MC524 buffer
        ranks, world = band_ranks(self.cfg.sp_size)
        band = x.shape[1] // world
        for block in self.blocks:
            x = torch.cat([block(x[:, r * band:(r + 1) * band], x, bias[r * band:(r + 1) * band]) for r in ranks], 1)
        return fields + self.head(x)


def swath_coverage(cfg, g):
    observed = torch.ones(cfg.n_lat, cfg.n_lon, dtype=torch.bool)
    start = int(torch.randint(cfg.n_lon, (1,), generator=g))
    observed[:, [start, (start + 1) % cfg.n_lon]] = False
    return observed.flatten()


def synthetic_states(cfg, n, g):
    lon = torch.arange(cfg.n_lon) * 2 * math.pi / cfg.n_lon
    phase = torch.rand(n, cfg.variables, 1, 1, generator=g) * 2 * math.pi
    lat_profile = torch.linspace(-1, 1, cfg.n_lat)[None, None, :, None]
    now = torch.sin(lon + phase) * (1 - lat_profile ** 2)
    nxt = torch.sin(lon + phase + 0.3) * (1 - lat_profile ** 2)
    flat = lambda t: t.flatten(2).transpose(1, 2)
    return flat(now), flat(nxt)


def train(steps=80, seed=0):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    cfg = GridConfig()
    model = GridEmulator(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(steps):
        now, nxt = synthetic_states(cfg, 8, g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = model(now, swath_coverage(cfg, g))
        loss = F.mse_loss(pred.float(), nxt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    blocked = torch.isinf(model.neighbour_bias).float().mean().item()
    return loss.item(), blocked


if __name__ == "__main__":
    print("loss %.4f  blocked fraction of the neighbourhood bias %.3f" % train())
