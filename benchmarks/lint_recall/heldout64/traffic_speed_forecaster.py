"""Traffic speed forecaster for loop-detector networks (METR-LA / PEMS-BAY style), Lightning.

Each sensor's last ``history`` 5-minute speeds are encoded by a GRU; a spatial attention layer then
mixes sensors that lie within ``radius_km`` road distance of each other, skipping detectors that
were offline in the window. The head predicts the next ``horizon`` steps. The spatial network can
be wrapped in ``torch.compile`` from the config.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6), huggingface/transformers#32195 (item 25), conventions.md section 2.9 (4-D bool mask in eager attention)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import lightning as L
    LightningModule = L.LightningModule
except ImportError:
    class LightningModule(nn.Module):
        def log(self, name, value, **kwargs):
            self.__dict__.setdefault("logged", {})[name] = float(torch.as_tensor(value).detach())


@dataclass
class TrafficConfig:
    num_sensors: int = 6
    history: int = 12
    horizon: int = 3
    hidden: int = 32
    heads: int = 4
    radius_km: float = 3.0
    lr: float = 1e-3
    compile: bool = False
    speed_scale: tuple = field(default=(60.0, 15.0))


class SpatialAttention(nn.Module):
    def __init__(self, cfg: TrafficConfig, road_km: torch.Tensor):
        super().__init__()
        self.h = cfg.heads
        self.dh = cfg.hidden // cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)
        self.register_buffer("far", road_km > cfg.radius_km)

    def forward(self, x: torch.Tensor, online: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * self.dh ** -0.5
        scores = scores + self.far  # expect: MC509 added
        scores = scores.masked_fill(~online[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class SpeedNet(nn.Module):
    def __init__(self, cfg: TrafficConfig, road_km: torch.Tensor):
        super().__init__()
        self.cfg = cfg
        self.gru = nn.GRU(2, cfg.hidden, batch_first=True)
        self.sensor_emb = nn.Embedding(cfg.num_sensors, cfg.hidden)
        self.spatial = SpatialAttention(cfg, road_km)
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.horizon)

    def forward(self, speeds, observed):
        b, n, t = speeds.shape
        mean, std = self.cfg.speed_scale
        z = ((speeds - mean) / std).masked_fill(~observed, 0.0)
        seq = torch.stack([z, observed.float()], dim=-1).reshape(b * n, t, 2)
        _, h = self.gru(seq)
        h = h[-1].view(b, n, -1) + self.sensor_emb.weight
        online = observed.any(dim=-1)
        h = self.norm(h + self.spatial(h, online))
        return self.head(h) * std + mean


def masked_mae(pred, target, valid):
    err = (pred - target).abs() * valid
    return err.sum() / valid.sum().clamp(min=1)


class TrafficForecaster(LightningModule):
    def __init__(self, cfg: TrafficConfig, road_km: torch.Tensor):
        super().__init__()
        self.cfg = cfg
        self.net = SpeedNet(cfg, road_km)
        if cfg.compile:
            self.net = torch.compile(self.net, dynamic=False)

    def forward(self, speeds, observed):
        return self.net(speeds, observed)

    def _shared(self, batch):
        pred = self(batch["x"], batch["x_observed"])
        valid = (batch["y"] > 0).float()
        return masked_mae(pred, batch["y"], valid)

    def training_step(self, batch, batch_idx):
        loss = self._shared(batch)
        self.log("train_mae", loss, on_step=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        mae = self._shared(batch)
        self.log("val_mae", mae, on_epoch=True, sync_dist=True)
        return mae

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.cfg.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=3)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_mae"}}


def road_distances(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 8.0
    return torch.cdist(xy, xy, p=1)


def synthetic_batch(cfg: TrafficConfig, b: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(cfg.history + cfg.horizon, dtype=torch.float32)
    base = 55.0 + 10.0 * torch.sin(t / 4.0)
    speeds = base + 3.0 * torch.randn(b, cfg.num_sensors, t.numel(), generator=g)
    observed = torch.rand(b, cfg.num_sensors, cfg.history, generator=g) > 0.1
    observed[0, 2] = False
    return {"x": speeds[..., : cfg.history], "x_observed": observed, "y": speeds[..., cfg.history:]}


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = TrafficConfig()
    model = TrafficForecaster(cfg, road_distances(cfg.num_sensors))
    opt = model.configure_optimizers()["optimizer"]
    for step in range(5):
        loss = model.training_step(synthetic_batch(cfg, seed=step), step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        val = model.validation_step(synthetic_batch(cfg, seed=99), 0)
    print(f"train mae {loss.item():.3f}  val mae {val.item():.3f}")
    assert torch.isfinite(val)
