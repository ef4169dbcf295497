"""Autoregressive forecaster for hourly weather-station readings.

Each station's history is a sequence of hourly vectors (temperature, pressure, humidity,
wind u/v). A causal nn.TransformerEncoder predicts the next hour from every prefix, and a
rollout feeds predictions back for a multi-hour lead time.

Source: self_attention_mask_guide.txt §3 generate_causal_mask (seed), conventions.md §1 (nn.Transformer row)
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ForecastConfig:
    num_vars: int = 5
    dim: int = 32
    heads: int = 4
    layers: int = 2
    context: int = 48
    lead_time: int = 6


def causal_mask(n, device=None):
    return torch.triu(torch.ones(n, n, device=device), diagonal=1) * float("-inf")  # expect: MC522 weather


def hour_features(hours):
    angle = 2 * math.pi * hours / 24.0
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1)


class StationForecaster(nn.Module):
    def __init__(self, cfg: ForecastConfig):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(cfg.num_vars + 2, cfg.dim)
        layer = nn.TransformerEncoderLayer(cfg.dim, cfg.heads, 4 * cfg.dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.out = nn.Linear(cfg.dim, cfg.num_vars)

    def forward(self, readings, hours):
        x = self.inp(torch.cat([readings, hour_features(hours)], dim=-1))
        h = self.encoder(x, mask=causal_mask(readings.size(1), readings.device))
        return readings + self.out(h)

    @torch.no_grad()
    def rollout(self, readings, hours):
        for _ in range(self.cfg.lead_time):
            nxt = self(readings, hours)[:, -1:]
            readings = torch.cat([readings, nxt], dim=1)[:, -self.cfg.context:]
            hours = torch.cat([hours, hours[:, -1:] + 1], dim=1)[:, -self.cfg.context:]
        return readings[:, -self.cfg.lead_time:]


def synthetic_stations(n, length, num_vars, generator):
    hours = torch.arange(length, dtype=torch.float32).expand(n, length) + torch.randint(0, 24, (n, 1), generator=generator)
    daily = torch.sin(2 * math.pi * hours / 24.0)[..., None]
    drift = torch.randn(n, 1, num_vars, generator=generator)
    return daily * drift + 0.05 * torch.randn(n, length, num_vars, generator=generator), hours


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = ForecastConfig()
    readings, hours = synthetic_stations(16, cfg.context + 1, cfg.num_vars, g)
    model = StationForecaster(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(10):
        pred = model(readings[:, :-1], hours[:, :-1])
        loss = F.mse_loss(pred, readings[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"train mse {loss.item():.4f}")
    forecast = model.eval().rollout(readings[:2, :-1], hours[:2, :-1])
    print("forecast", tuple(forecast.shape), f"mean {forecast.mean().item():.3f}")
