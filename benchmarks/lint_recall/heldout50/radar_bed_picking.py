"""Ice thickness from airborne ice-penetrating radar traces (glaciology notebook export).

Each flight segment is a sequence of radar traces; a small attention model looks along the
track to pick the bed echo in every trace. Traces recorded while the aircraft banked are
flagged as unusable and left out of attention.

Source: seed masked_fill_inplace.txt (区别)
"""

# %%
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(13)

TRACES, SAMPLES = 40, 64


def flight_segment(n):
    depth = 20 + 10 * torch.sin(torch.linspace(0, 3, TRACES) + torch.rand(n, 1) * 6)
    z = torch.arange(SAMPLES).float()
    echo = torch.exp(-0.5 * ((z[None, None, :] - depth[..., None]) / 1.5) ** 2)
    radargram = echo + 0.3 * torch.randn(n, TRACES, SAMPLES)
    trace_ok = torch.rand(n, TRACES) > 0.2
    radargram[~trace_ok] = 5 * torch.randn(int((~trace_ok).sum()), SAMPLES)
    return radargram, depth, trace_ok


train_x, train_depth, train_ok = flight_segment(256)
test_x, test_depth, test_ok = flight_segment(64)

# %%
class BedPicker(nn.Module):
    def __init__(self, d=48, heads=4):
        super().__init__()
        self.trace_enc = nn.Sequential(nn.Linear(SAMPLES, d), nn.GELU(), nn.Linear(d, d))
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads
        self.head = nn.Linear(2 * d, 1)

    @staticmethod
    def attend(q, k, v, trace_ok):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores.masked_fill(~trace_ok[:, None, None, :], float("-inf"))  # expect: MC525 staticmethod
        return scores.softmax(dim=-1) @ v

    def forward(self, radargram, trace_ok):
        b, t, _ = radargram.shape
        h = self.trace_enc(radargram)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ctx = self.attend(q, k, v, trace_ok).transpose(1, 2).reshape(b, t, -1)
        return self.head(torch.cat([h, ctx], -1)).squeeze(-1)


picker = BedPicker()
opt = torch.optim.Adam(picker.parameters(), lr=3e-3)

# %%
for epoch in range(150):
    pred = picker(train_x, train_ok)
    loss = F.mse_loss(pred[train_ok], train_depth[train_ok])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("train MSE", loss.item())

# %%
with torch.no_grad():
    pred = picker(test_x, test_ok)
print("bed pick MAE on usable traces (samples)", (pred - test_depth)[test_ok].abs().mean().item())
