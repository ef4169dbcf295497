"""Next-day avalanche danger level from automatic snow-station records (Jupyter export).

Each sample is two weeks of daily summaries (new snow, snow depth, wind, air temperature,
surface temperature) from one high-altitude station, labelled with the regional danger
level (1-5) issued for the next day. Days that failed quality control and days when the
station was offline are left out of attention.

Source: huggingface/transformers PR #27114 and NVIDIA-NeMo/Automodel PR #2658 (conventions.md section 3 items 15 and 16), section 2.3, section 5 item 4
"""

# %%
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(6)


@dataclass
class NowcastConfig:
    days: int = 14
    features: int = 5
    d_model: int = 32
    n_heads: int = 4
    levels: int = 5
    lr: float = 3e-3


cfg = NowcastConfig()
NEG = torch.finfo(torch.float32).min

# %%
n = 400
records = torch.randn(n, cfg.days, cfg.features)
load = records[:, -4:, 0].sum(1) + 0.5 * records[:, -2:, 2].sum(1)
danger = torch.bucketize(load, torch.tensor([-2.0, -0.5, 0.5, 2.0]))
qc_failed = torch.rand(n, cfg.days) < 0.1
offline = torch.zeros(n, cfg.days, dtype=torch.bool)
for i in range(0, n, 25):
    offline[i] = True
    qc_failed[i] = True
offline[1::7, :3] = True
qc_failed[1::7, :3] = True
records[offline] = 0.0


def station_biases(qc_failed, offline):
    qc_bias = torch.zeros(qc_failed.shape).masked_fill(qc_failed, NEG)
    outage_bias = torch.zeros(offline.shape).masked_fill(offline, NEG)
    return qc_bias[:, None, None, :], outage_bias[:, None, None, :]


# %%
class DangerNowcaster(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.inp = nn.Linear(cfg.features, cfg.d_model)
        self.day = nn.Parameter(torch.zeros(cfg.days, cfg.d_model))
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.levels)

    def forward(self, x, bias):
        b, t, _ = x.shape
        h = self.inp(x) + self.day
        dh = self.cfg.d_model // self.cfg.n_heads
        q, k, v = self.qkv(h).view(b, t, 3, self.cfg.n_heads, dh).permute(2, 0, 3, 1, 4)
        w = (q @ k.transpose(-2, -1) / math.sqrt(dh) + bias).softmax(-1)
        h = self.norm(h + (w @ v).transpose(1, 2).reshape(b, t, -1))
        return self.head(h[:, -1])


model = DangerNowcaster(cfg)
opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)

# %%
qc_bias, outage_bias = station_biases(qc_failed, offline)
bias = qc_bias + outage_bias  # expect: MC513 cell
for epoch in range(40):
    loss = F.cross_entropy(model(records[:320], bias[:320]), danger[:320])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("train loss", loss.item())

# %%
with torch.no_grad():
    pred = model(records[320:], bias[320:]).argmax(-1)
print("exact level accuracy", (pred == danger[320:]).float().mean().item())
