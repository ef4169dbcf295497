"""Last-mile delivery ETA predictor: for a courier's route, predicts the arrival delay at each stop from the stops already driven.

Source: conventions.md §1 (direction cheat-sheet, additive masks), §2.3; seed self_attention_mask_guide.txt §3 (generate_causal_mask), §7 Q3.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class StopType(Enum):
    DEPOT = 0
    RESIDENTIAL = 1
    BUSINESS = 2
    LOCKER = 3


class VehicleKind(Enum):
    VAN = 0
    CARGO_BIKE = 1
    WALKER = 2


@dataclass
class EtaConfig:
    stop_features: int = 5
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_stops: int = 60
    dropout: float = 0.0

    def validate(self) -> "EtaConfig":
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        if self.max_stops < 2:
            raise ValueError("max_stops must be at least 2")
        return self


def build_causal_mask(num_stops: int) -> torch.Tensor:
    """Additive (num_stops, num_stops) mask for route-order attention."""
    return torch.triu(torch.ones(num_stops, num_stops), diagonal=1) * float("-inf")  # expect: MC522 nan


def make_padding_mask(num_stops: torch.Tensor, width: int) -> torch.Tensor:
    """(batch, width) bool mask, True at padded stops."""
    return torch.arange(width)[None, :] >= num_stops[:, None]


class RouteEncoder(nn.Module):
    def __init__(self, cfg: EtaConfig) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.stop_type = nn.Embedding(len(StopType), cfg.d_model)
        self.vehicle = nn.Embedding(len(VehicleKind), cfg.d_model)
        self.features = nn.Linear(cfg.stop_features, cfg.d_model)
        self.order = nn.Embedding(cfg.max_stops, cfg.d_model)
        self.attn = nn.ModuleList(
            nn.MultiheadAttention(cfg.d_model, cfg.n_heads, dropout=cfg.dropout, batch_first=True)
            for _ in range(cfg.n_layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(cfg.n_layers))
        self.ffn = nn.ModuleList(
            nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.GELU(), nn.Linear(2 * cfg.d_model, cfg.d_model))
            for _ in range(cfg.n_layers)
        )

    def forward(self, route: Dict[str, torch.Tensor], key_padding: Optional[torch.Tensor] = None) -> torch.Tensor:
        n = route["stop_type"].size(1)
        if n > self.cfg.max_stops:
            raise ValueError(f"route with {n} stops exceeds max_stops")
        x = (self.stop_type(route["stop_type"]) + self.features(route["features"])
             + self.vehicle(route["vehicle"])[:, None] + self.order(torch.arange(n)))
        causal = build_causal_mask(n)
        pad_bias = None
        if key_padding is not None:
            pad_bias = torch.zeros(key_padding.shape).masked_fill(key_padding, float("-inf"))
        for attn, norm, ffn in zip(self.attn, self.norms, self.ffn):
            h = norm(x)
            out, _ = attn(h, h, h, attn_mask=causal, key_padding_mask=pad_bias, need_weights=False)
            x = x + out
            x = x + ffn(x)
        return x


class EtaPredictor(nn.Module):
    def __init__(self, cfg: EtaConfig) -> None:
        super().__init__()
        self.encoder = RouteEncoder(cfg)
        self.delay_head = nn.Linear(cfg.d_model, 1)

    def forward(self, route: Dict[str, torch.Tensor]) -> torch.Tensor:
        padding = make_padding_mask(route["num_stops"], route["stop_type"].size(1))
        h = self.encoder(route, padding)
        return self.delay_head(h).squeeze(-1)


def collate_routes(routes: Sequence[Dict[str, torch.Tensor]], cfg: EtaConfig) -> Dict[str, torch.Tensor]:
    width = max(r["stop_type"].numel() for r in routes)
    batch = {
        "stop_type": torch.zeros(len(routes), width, dtype=torch.long),
        "features": torch.zeros(len(routes), width, cfg.stop_features),
        "delay": torch.zeros(len(routes), width),
        "vehicle": torch.tensor([int(r["vehicle"]) for r in routes]),
        "num_stops": torch.tensor([r["stop_type"].numel() for r in routes]),
    }
    for i, r in enumerate(routes):
        m = r["stop_type"].numel()
        batch["stop_type"][i, :m], batch["features"][i, :m], batch["delay"][i, :m] = r["stop_type"], r["features"], r["delay"]
    return batch


def simulate_route(num_stops: int, cfg: EtaConfig, gen: torch.Generator) -> Dict[str, torch.Tensor]:
    stop_type = torch.randint(1, len(StopType), (num_stops,), generator=gen)
    stop_type[0] = StopType.DEPOT.value
    features = torch.rand(num_stops, cfg.stop_features, generator=gen)
    delay = features[:, 0].cumsum(0) * 2.0 + torch.randn(num_stops, generator=gen) * 0.1
    return {"stop_type": stop_type, "features": features, "delay": delay,
            "vehicle": torch.randint(0, len(VehicleKind), (), generator=gen)}


def masked_mae(pred: torch.Tensor, target: torch.Tensor, num_stops: torch.Tensor) -> torch.Tensor:
    real = ~make_padding_mask(num_stops, pred.size(1))
    return (pred - target).abs()[real].mean()


def predict_etas(model: EtaPredictor, batch: Dict[str, torch.Tensor], start_minutes: float) -> List[List[float]]:
    """Predicted arrival minute at each real stop of each route."""
    model.eval()
    with torch.no_grad():
        delay = model(batch)
    out = []
    for i, n in enumerate(batch["num_stops"].tolist()):
        planned = torch.arange(n, dtype=torch.float32) * 6.0 + start_minutes
        out.append((planned + delay[i, :n]).round().tolist())
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = EtaConfig()
    gen = torch.Generator().manual_seed(3)
    batch = collate_routes([simulate_route(n, cfg, gen) for n in (9, 14, 6)], cfg)
    model = EtaPredictor(cfg)
    model.train()
    loss = masked_mae(model(batch), batch["delay"], batch["num_stops"])
    loss.backward()
    logger.info("train MAE %.3f", loss.item())
    print(predict_etas(model, batch, start_minutes=480.0)[2])
