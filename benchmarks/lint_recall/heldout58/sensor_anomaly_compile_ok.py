"""Streaming anomaly detection on pump-station sensor telemetry, compiled with torch.compile.

Each station reports pressure, flow, vibration and temperature channels once per second. The
detector keeps the last 64 readings per station in a ring buffer, masks a random subset of
steps, and scores each new reading by how badly a local-attention transformer reconstructs it.
Shapes are static (fixed window, fixed station batch) so the compiled graph is reused without
recompiles; dropped telemetry arrives as NaN and is masked as keys.

Source: conventions.md §2.9 (eager adds the mask), pytorch/pytorch#103963 (conventions.md §3 item 6)
"""

import argparse
import math
from dataclasses import dataclass, field

import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DetectorConfig:
    channels: int = 4
    window: int = 64
    band: int = 16
    dim: int = 64
    heads: int = 4
    layers: int = 2
    mask_ratio: float = 0.15
    threshold_quantile: float = 0.995
    compile_mode: str = "reduce-overhead"
    stations: list = field(default_factory=lambda: [f"PS-{i:03d}" for i in range(8)])


def outside_band(window, band):
    i = torch.arange(window)[:, None]
    j = torch.arange(window)[None, :]
    return (i - j).abs() > band


class BandAttention(nn.Module):
    def __init__(self, cfg: DetectorConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)
        self.register_buffer("outside_band", outside_band(cfg.window, cfg.band), persistent=False)

    def forward(self, x, missing):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(self.outside_band, float("-inf"))
        scores = torch.where(missing[:, None, None, :], torch.finfo(scores.dtype).min, scores)
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class TelemetryReconstructor(nn.Module):
    def __init__(self, cfg: DetectorConfig):
        super().__init__()
        self.inp = nn.Linear(2 * cfg.channels, cfg.dim)
        self.pos = nn.Parameter(torch.randn(1, cfg.window, cfg.dim) * 0.02)
        self.attn = nn.ModuleList(BandAttention(cfg) for _ in range(cfg.layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.LayerNorm(cfg.dim), nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(),
                                              nn.Linear(2 * cfg.dim, cfg.dim)) for _ in range(cfg.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.dim) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.dim, cfg.channels)

    def forward(self, readings, hide):
        missing = torch.isnan(readings).any(-1)
        blank = missing | hide
        values = torch.nan_to_num(readings).masked_fill(blank[..., None], 0.0)
        x = self.inp(torch.cat([values, blank[..., None].expand_as(values).float()], -1)) + self.pos
        for norm, attn, ff in zip(self.norms, self.attn, self.ff):
            x = x + attn(norm(x), missing)
            x = x + ff(x)
        return self.head(x)


def synthetic_telemetry(steps, cfg, generator=None, anomaly_at=None):
    t = torch.arange(steps, dtype=torch.float32)
    phase = torch.rand(len(cfg.stations), cfg.channels, 1, generator=generator) * 6.28
    period = torch.tensor([60.0, 90.0, 17.0, 300.0])[None, :, None]
    x = torch.sin(2 * math.pi * t / period + phase) + 0.05 * torch.randn(len(cfg.stations), cfg.channels, steps, generator=generator)
    x = x.transpose(1, 2).contiguous()
    drops = torch.rand(len(cfg.stations), steps, generator=generator) < 0.02
    x[drops] = float("nan")
    if anomaly_at is not None:
        x[0, anomaly_at:anomaly_at + 5, 2] += 3.0
    return x


def train(model, cfg, steps=300, batch=32, lr=2e-3, generator=None):
    series = synthetic_telemetry(4000, cfg, generator)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(steps):
        s = torch.randint(0, series.size(0), (batch,), generator=generator)
        start = torch.randint(0, series.size(1) - cfg.window, (batch,), generator=generator)
        idx = start[:, None] + torch.arange(cfg.window)
        window = series[s[:, None], idx]
        hide = torch.rand(batch, cfg.window, generator=generator) < cfg.mask_ratio
        hide[:, -1] = True
        recon = model(window, hide)
        target_ok = hide & ~torch.isnan(window).any(-1)
        loss = F.mse_loss(recon[target_ok], window[target_ok])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


class StreamingDetector:
    def __init__(self, model, cfg: DetectorConfig, threshold: float):
        self.cfg = cfg
        self.threshold = threshold
        self.model = torch.compile(model.eval(), mode=cfg.compile_mode, dynamic=False)
        self.ring = torch.zeros(len(cfg.stations), cfg.window, cfg.channels)
        torch._dynamo.config.cache_size_limit = 4

    @torch.no_grad()
    def push(self, reading):
        self.ring = torch.cat([self.ring[:, 1:], reading[:, None]], dim=1)
        hide = torch.zeros(self.ring.shape[:2], dtype=torch.bool)
        hide[:, -1] = True
        recon = self.model(self.ring, hide)[:, -1]
        err = (recon - torch.nan_to_num(reading)).pow(2).mean(-1)
        err = err.masked_fill(torch.isnan(reading).any(-1), 0.0)
        return [name for name, e in zip(self.cfg.stations, err.tolist()) if e > self.threshold]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threshold", type=float, default=0.5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    cfg = DetectorConfig()
    model = TelemetryReconstructor(cfg)
    print("train mse", train(model, cfg, args.steps, generator=gen))
    detector = StreamingDetector(model, cfg, args.threshold)
    stream = synthetic_telemetry(400, cfg, gen, anomaly_at=300)
    for step in range(stream.size(1)):
        alarms = detector.push(stream[:, step])
        if alarms and step >= cfg.window:
            print(step, alarms)


if __name__ == "__main__":
    main()
