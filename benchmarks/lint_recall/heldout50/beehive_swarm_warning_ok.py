"""Swarm warning from beehive scale and sensor logs (exported from a Jupyter notebook).

Hive monitors log weight, brood temperature, humidity and two acoustic band energies every
ten minutes; loggers drop readings when the battery sags. A small attention model scores
the last day of readings for an imminent swarm.

Source: conventions.md section 2.9 and section 1 (HF 4-D masks row); huggingface/transformers#32195 (conventions.md section 3 item 25)
"""

# %%
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3)

N_HIVES, STEPS, FEATURES = 256, 48, 5


def simulate_hives():
    t = torch.linspace(0, 1, STEPS)
    swarm = torch.rand(N_HIVES) < 0.5
    x = torch.randn(N_HIVES, STEPS, FEATURES) * 0.3
    x[:, :, 0] += 40 - 2 * t * swarm[:, None]
    x[:, :, 1] += 35 + torch.sin(6 * t)
    x[:, :, 3] += 1.5 * swarm[:, None] * (t > 0.6)
    dropped = torch.rand(N_HIVES, STEPS) < 0.25
    x[dropped] = float("nan")
    return x, swarm.float()


readings, swarmed = simulate_hives()
mean = readings.nanmean(dim=(0, 1))
std = (readings - mean).pow(2).nanmean(dim=(0, 1)).sqrt()

# %%
class HiveAttention(nn.Module):
    def __init__(self, d, n_heads=4):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, h, bias):
        b, t, d = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.n_heads)
        scores = scores.masked_fill(bias, float("-inf"))
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class SwarmScorer(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.inp = nn.Linear(FEATURES, d)
        self.pos = nn.Parameter(torch.zeros(STEPS, d))
        self.attn = HiveAttention(d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        missing = x.isnan().any(-1)
        x = torch.nan_to_num((x - mean) / std)
        h = self.inp(x) + self.pos
        bias = missing[:, None, None, :]
        h = self.norm(h + self.attn(h, bias))
        keep = (~missing).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1)).squeeze(-1)


scorer = SwarmScorer()
opt = torch.optim.Adam(scorer.parameters(), lr=1e-2)

# %%
for epoch in range(30):
    logits = scorer(readings[:192])
    loss = F.binary_cross_entropy_with_logits(logits, swarmed[:192])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("train loss", round(loss.item(), 4))

# %%
with torch.no_grad():
    acc = ((scorer(readings[192:]) > 0).float() == swarmed[192:]).float().mean()
print("held-out hive accuracy", acc.item())
