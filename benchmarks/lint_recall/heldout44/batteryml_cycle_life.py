"""Early-cycle battery life prediction in the layout of microsoft/BatteryML.

``BatteryData`` / ``CycleData`` records, a feature extractor resampling each discharge curve
Q(V) on a voltage grid, a label annotator giving log cycle life, and a ``BaseModel`` subclass:
points of one cycle attend to each other, then one token per cycle attends over the recorded
cycles of the cell (cells are recorded for a different number of early cycles). Synthetic
LFP-like cells in the spirit of Severson et al. (Nature Energy 2019).

Source: seed self_attention_mask_guide.txt (section 6, create_block_mask).
"""

import math
import random
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CycleData:
    cycle_number: int
    voltage_in_V: List[float]
    discharge_capacity_in_Ah: List[float]


@dataclass
class BatteryData:
    cell_id: str
    nominal_capacity_in_Ah: float
    cycle_data: List[CycleData] = field(default_factory=list)
    cycle_life: int = 0


def simulate_cell(rng, idx, max_cycles=12, points=40):
    fade = rng.uniform(2e-4, 1.6e-3)
    cycle_life = int(0.2 / fade)
    n_cycles = rng.randint(6, max_cycles)
    cell = BatteryData(cell_id=f"b{idx:03d}", nominal_capacity_in_Ah=1.1, cycle_life=cycle_life)
    for c in range(n_cycles):
        cap = 1.1 * (1.0 - fade * (10 * c + 2)) * (1.0 + rng.gauss(0.0, 0.002))
        volts = [3.6 - 1.6 * k / (points - 1) for k in range(points)]
        knee = 2.9 + 400 * fade * (c + 1) / n_cycles
        q = [cap / (1.0 + math.exp(-(knee - v) * 9.0)) for v in volts]
        cell.cycle_data.append(CycleData(cycle_number=10 * c + 2, voltage_in_V=volts, discharge_capacity_in_Ah=q))
    return cell


class QdlinFeatureExtractor:
    def __init__(self, grid_points=8, v_min=2.0, v_max=3.6):
        self.grid = torch.linspace(v_max, v_min, grid_points)

    def __call__(self, cell, max_cycles):
        feats = torch.zeros(max_cycles, len(self.grid), 2)
        keep = torch.zeros(max_cycles, dtype=torch.bool)
        first = None
        for i, cycle in enumerate(cell.cycle_data[:max_cycles]):
            v = torch.tensor(cycle.voltage_in_V)
            q = torch.tensor(cycle.discharge_capacity_in_Ah)
            idx = torch.searchsorted(-v, -self.grid).clamp(max=len(v) - 1)
            qd = q[idx] / cell.nominal_capacity_in_Ah
            first = qd if first is None else first
            feats[i, :, 0] = qd
            feats[i, :, 1] = (qd - first) * 50.0
            keep[i] = True
        return feats, keep


def log_cycle_life_annotator(cell):
    return math.log10(cell.cycle_life)


def build_intra_cycle_mask(num_cycles, points_per_cycle):
    cycle_index = torch.arange(num_cycles).repeat_interleave(points_per_cycle)
    n = cycle_index.numel()
    mask = torch.zeros(n, n)
    for c in range(num_cycles):
        start = c * points_per_cycle
        mask[start : start + points_per_cycle, start : start + points_per_cycle] = 0
    mask[mask == 0] = float("-inf")  # expect: MC504 builder
    return mask, cycle_index


class CyclePointAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, bias):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        probs = F.softmax(scores + bias, dim=-1)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, n, d))


class IntraCycleBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CyclePointAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attn_bias):
        x = x + self.attn(self.norm1(x), attn_bias)
        return x + self.mlp(self.norm2(x))


class BaseModel(nn.Module):
    def fit(self, feats, keep, labels, epochs, batch_size=16):
        optimizer = torch.optim.Adam(self.parameters(), lr=2e-3)
        for epoch in range(epochs):
            self.train()
            perm = torch.randperm(len(labels))
            for s in range(0, len(labels), batch_size):
                idx = perm[s : s + batch_size]
                loss = F.mse_loss(self(feats[idx], keep[idx]), labels[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return self

    @torch.no_grad()
    def predict(self, feats, keep):
        self.eval()
        return self(feats, keep)


class CycleTransformerRULPredictor(BaseModel):
    def __init__(self, max_cycles=12, points_per_cycle=8, dim=32, heads=4):
        super().__init__()
        self.max_cycles = max_cycles
        self.points_per_cycle = points_per_cycle
        mask, cycle_index = build_intra_cycle_mask(max_cycles, points_per_cycle)
        self.register_buffer("intra_bias", mask)
        self.register_buffer("cycle_index", cycle_index)
        self.point_embed = nn.Linear(2, dim)
        self.voltage_embed = nn.Parameter(torch.randn(points_per_cycle, dim) * 0.02)
        self.cycle_embed = nn.Embedding(max_cycles, dim)
        self.intra = nn.ModuleList([IntraCycleBlock(dim, heads) for _ in range(2)])
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.inter = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 1)

    def forward(self, feats, cycle_keep):
        b = feats.size(0)
        x = self.point_embed(feats) + self.voltage_embed
        x = x.reshape(b, -1, x.size(-1)) + self.cycle_embed(self.cycle_index)
        for block in self.intra:
            x = block(x, attn_bias=self.intra_bias)
        cycle_tokens = x.view(b, self.max_cycles, self.points_per_cycle, -1).mean(2)
        cycle_tokens = self.inter(cycle_tokens, src_key_padding_mask=~cycle_keep)
        w = cycle_keep.unsqueeze(-1).float()
        return self.head((cycle_tokens * w).sum(1) / w.sum(1)).squeeze(-1)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    cells = [simulate_cell(rng, i) for i in range(240)]
    extractor = QdlinFeatureExtractor()
    feats, keep = zip(*(extractor(c, 12) for c in cells))
    feats, keep = torch.stack(feats), torch.stack(keep)
    labels = torch.tensor([log_cycle_life_annotator(c) for c in cells])
    mean, std = labels[:180].mean(), labels[:180].std()
    model = CycleTransformerRULPredictor()
    model.fit(feats[:180], keep[:180], (labels[:180] - mean) / std, epochs=25)
    pred = model.predict(feats[180:], keep[180:]) * std + mean
    life_true, life_pred = 10 ** labels[180:], 10 ** pred
    rmse = torch.sqrt(((life_pred - life_true) ** 2).mean()).item()
    mape = ((life_pred - life_true).abs() / life_true).mean().item()
    print(f"test cells {len(life_true)}  RMSE {rmse:.1f} cycles  MAPE {100 * mape:.1f}%")
    print(f"baseline (train mean) MAPE {100 * ((10 ** mean - life_true).abs() / life_true).mean().item():.1f}%")


if __name__ == "__main__":
    main()
