"""Pedestrian trajectory forecasting in crowded scenes (ETH/UCY protocol: 8 observed frames, 12 predicted).

Each pedestrian's observed track is encoded by temporal attention with a learned per-head bias over
frame pairs, then pedestrians of the same scene attend to each other (social attention); scenes
have different numbers of pedestrians and are padded to the largest. The decoder regresses the
12 future displacements; ADE / FDE are reported over real pedestrians.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险; 与模型缓冲区的配合).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn


@dataclass(slots=True, frozen=True)
class ForecastConfig:
    obs_len: int = 8
    pred_len: int = 12
    dim: int = 48
    heads: int = 4


class Scene(TypedDict):
    obs: Float[Tensor, "b n t 2"]
    future: Float[Tensor, "b n p 2"]
    agent_keep: Bool[Tensor, "b n"]


class Metric(Protocol):
    def __call__(self, pred: Tensor, target: Tensor, keep: Tensor) -> Tensor: ...


def split_heads(x: Tensor, heads: int) -> Tensor:
    *lead, d = x.shape
    return x.view(*lead, heads, d // heads).transpose(-2, -3)


def merge_heads(x: Tensor) -> Tensor:
    x = x.transpose(-2, -3)
    return x.reshape(*x.shape[:-2], -1)


class TemporalEncoder(nn.Module):
    def __init__(self, cfg: ForecastConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.inp = nn.Linear(4, cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.time_bias = nn.Parameter(torch.zeros(cfg.heads, cfg.obs_len, cfg.obs_len))
        self.register_buffer("future", torch.ones(cfg.obs_len, cfg.obs_len, dtype=torch.bool).triu(1))

    def pair_bias(self) -> Float[Tensor, "h t t"]:
        bias = self.time_bias
        return bias.masked_fill(self.future, float("-inf"))

    def forward(self, obs: Float[Tensor, "b n t 2"]) -> Float[Tensor, "b n d"]:
        vel = torch.diff(obs, dim=2, prepend=obs[:, :, :1])
        x = self.inp(torch.cat([obs - obs[:, :, -1:], vel], dim=-1))
        q, k, v = (split_heads(part, self.heads) for part in self.qkv(x).chunk(3, dim=-1))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=self.pair_bias())
        return merge_heads(ctx)[:, :, -1] + x[:, :, -1]


class SocialAttention(nn.Module):
    def __init__(self, cfg: ForecastConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim + 2, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, h: Float[Tensor, "b n d"], last: Float[Tensor, "b n 2"], agent_keep: Bool[Tensor, "b n"]) -> Float[Tensor, "b n d"]:
        q, k, v = (split_heads(part, self.heads) for part in self.qkv(torch.cat([h, last], dim=-1)).chunk(3, dim=-1))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=agent_keep[:, None, None, :])
        return h + self.out(merge_heads(ctx))


class SocialForecaster(nn.Module):
    def __init__(self, cfg: ForecastConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.temporal = TemporalEncoder(cfg)
        self.social = SocialAttention(cfg)
        self.head = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.ReLU(), nn.Linear(cfg.dim, cfg.pred_len * 2))

    def forward(self, scene: Scene) -> Float[Tensor, "b n p 2"]:
        obs = scene["obs"]
        h = self.social(self.temporal(obs), obs[:, :, -1], scene["agent_keep"])
        steps = self.head(h).view(*h.shape[:2], self.cfg.pred_len, 2)
        return obs[:, :, -1:] + steps.cumsum(dim=2)


def ade(pred: Tensor, target: Tensor, keep: Tensor) -> Tensor:
    return (pred - target).norm(dim=-1).mean(dim=-1)[keep].mean()


def fde(pred: Tensor, target: Tensor, keep: Tensor) -> Tensor:
    return (pred[:, :, -1] - target[:, :, -1]).norm(dim=-1)[keep].mean()


def simulate(batch: int, cfg: ForecastConfig, gen: torch.Generator) -> Scene:
    n_max, total = 6, cfg.obs_len + cfg.pred_len
    counts = torch.randint(2, n_max + 1, (batch,), generator=gen)
    agent_keep = torch.arange(n_max)[None] < counts[:, None]
    start = torch.rand(batch, n_max, 1, 2, generator=gen) * 10
    speed = 0.3 + 0.2 * torch.randn(batch, n_max, 1, 2, generator=gen)
    turn = 0.02 * torch.randn(batch, n_max, 1, 1, generator=gen)
    t = torch.arange(total, dtype=torch.float32)[None, None, :, None]
    track = start + speed * t + turn * t**2
    track = track.masked_fill(~agent_keep[:, :, None, None], 0.0)
    return Scene(obs=track[:, :, : cfg.obs_len], future=track[:, :, cfg.obs_len :], agent_keep=agent_keep)


def train(model: SocialForecaster, *, steps: int = 200, seed: int = 0) -> dict[str, float]:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(steps):
        scene = simulate(32, model.cfg, gen)
        loss = ade(model(scene), scene["future"], scene["agent_keep"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    metrics: dict[str, Metric] = {"ade": ade, "fde": fde}
    with torch.no_grad():
        test = simulate(256, model.cfg, torch.Generator().manual_seed(seed + 1))
        pred = model(test)
        return {name: fn(pred, test["future"], test["agent_keep"]).item() for name, fn in metrics.items()}


if __name__ == "__main__":
    torch.manual_seed(0)
    print(train(SocialForecaster(ForecastConfig())))
