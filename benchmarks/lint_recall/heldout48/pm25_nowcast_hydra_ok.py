"""Six-hour PM2.5 forecasts for a monitoring station from its neighbours, configured with Hydra.

Every sample is one target station with the last `history` hours of the network's stations;
stations that were offline in the window are zero-filled and flagged. The target's encoded
history queries the station tokens (cross-attention with a distance embedding). Structured
configs are registered in the ConfigStore, so `python pm25_nowcast_hydra.py model.d_model=96
train.lr=5e-4` or an Optuna `--multirun` sweep overrides them; `main` returns the best
validation RMSE for the sweeper.

Source: seed self_attention_mask_guide.txt (section 7, Q3), pytorch/pytorch#103963 (conventions.md section 3 item 6).
"""

import math
from dataclasses import dataclass, field

import hydra
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Dataset


@dataclass
class DataConfig:
    n_stations: int = 10
    history: int = 48
    horizon: int = 6
    outage_rate: float = 0.25
    n_train: int = 1500
    n_val: int = 300


@dataclass
class ModelConfig:
    d_model: int = 64
    n_heads: int = 4
    dropout: float = 0.1


@dataclass
class TrainConfig:
    epochs: int = 15
    batch_size: int = 32
    lr: float = 1e-3
    seed: int = 0


@dataclass
class AQConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


cs = ConfigStore.instance()
cs.store(name="aq_config", node=AQConfig)


class StationWindows(Dataset):
    def __init__(self, cfg: DataConfig, n: int, seed: int):
        self.xy = np.random.default_rng(2024).uniform(-1, 1, (cfg.n_stations, 2)).astype(np.float32)
        rng = np.random.default_rng(seed)
        self.samples = []
        for _ in range(n):
            t = np.arange(cfg.history + cfg.horizon)
            plume = np.cumsum(rng.normal(0, 0.3, t.size)) + 2 * np.sin(2 * np.pi * (t + rng.integers(24)) / 24)
            offsets = 0.8 * self.xy[:, 0] + rng.normal(0, 0.3, cfg.n_stations)
            series = plume[None, :] + offsets[:, None] + rng.normal(0, 0.1, (cfg.n_stations, t.size))
            online = rng.random(cfg.n_stations) > cfg.outage_rate
            online[0] = True
            hist = np.where(online[:, None], series[:, : cfg.history], 0.0).astype(np.float32)
            target = series[0, cfg.history:].astype(np.float32)
            self.samples.append((hist, online, target))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        hist, online, target = self.samples[i]
        return {"hist": torch.from_numpy(hist), "online": torch.from_numpy(online), "target": torch.from_numpy(target)}


class NeighbourAttentionForecaster(nn.Module):
    def __init__(self, cfg: ModelConfig, data: DataConfig, xy: np.ndarray):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.register_buffer("xy", torch.from_numpy(xy))
        self.hist_enc = nn.Sequential(nn.Linear(data.history, cfg.d_model), nn.GELU(), nn.Linear(cfg.d_model, cfg.d_model))
        self.dist_emb = nn.Linear(3, cfg.d_model)
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Sequential(nn.LayerNorm(2 * cfg.d_model), nn.Linear(2 * cfg.d_model, data.horizon))

    def forward(self, hist, online):
        b, n, _ = hist.shape
        tokens = self.hist_enc(hist)
        rel = self.xy - self.xy[:1]
        geo = torch.cat([rel, rel.norm(dim=-1, keepdim=True)], dim=-1)
        tokens = tokens + self.dist_emb(geo)[None]
        d_head = tokens.size(-1) // self.n_heads
        q = self.q(tokens[:, 0]).view(b, self.n_heads, d_head)
        k, v = self.kv(tokens).view(b, n, 2, self.n_heads, d_head).permute(2, 0, 3, 1, 4)

        def attend(q, k, v):
            scores = torch.einsum("bhd,bhnd->bhn", q, k) / math.sqrt(d_head)
            scores = scores.masked_fill(~online[:, None, :], float("-inf"))
            weights = self.drop(scores.softmax(dim=-1))
            return torch.einsum("bhn,bhnd->bhd", weights, v)

        ctx = attend(q, k, v).reshape(b, -1)
        return self.head(torch.cat([tokens[:, 0], ctx], dim=-1))


def evaluate(model, loader):
    model.eval()
    se, count = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            pred = model(batch["hist"], batch["online"])
            se += F.mse_loss(pred, batch["target"], reduction="sum").item()
            count += batch["target"].numel()
    return math.sqrt(se / count)


@hydra.main(version_base=None, config_name="aq_config")
def main(cfg: DictConfig) -> float:
    print(OmegaConf.to_yaml(cfg))
    torch.manual_seed(cfg.train.seed)
    train_set = StationWindows(cfg.data, cfg.data.n_train, seed=cfg.train.seed)
    val_set = StationWindows(cfg.data, cfg.data.n_val, seed=cfg.train.seed + 1)
    train_loader = DataLoader(train_set, batch_size=cfg.train.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=cfg.train.batch_size)
    model = NeighbourAttentionForecaster(cfg.model, cfg.data, train_set.xy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    best = float("inf")
    for epoch in range(cfg.train.epochs):
        model.train()
        for batch in train_loader:
            loss = F.mse_loss(model(batch["hist"], batch["online"]), batch["target"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        rmse = evaluate(model, val_loader)
        best = min(best, rmse)
        print(f"epoch {epoch}: val RMSE {rmse:.3f}")
    return best


if __name__ == "__main__":
    main()
