"""Time-series transformer for imputation of multivariate sensor data with missing values.

NaN marks a missing reading. `observed` (True = reading present) zeroes the inputs, a time step
with no reading at all is hidden as a key, and its query row is zeroed after the softmax so
that an empty step carries only its residual. Loss: MSE on held-out observed readings.
Bug: the attention probabilities (softmax output, needed by its backward) are zeroed in place.
Source: seed masked_fill_inplace.txt (注意 / 梯度计算风险: masked_fill_ on a tensor that takes part
in gradient computation breaks the backward pass; use masked_fill).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MissingAwareAttention(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, h, step_observed):  # h (B, T, D); step_observed bool (B, T)
        B, T, D = h.shape
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / (D // self.heads) ** 0.5
        scores = scores.masked_fill(~step_observed[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        attn.masked_fill_(~step_observed[:, None, :, None], 0.0)  # expect: MC505 timeseries
        return self.out((attn @ v).transpose(1, 2).reshape(B, T, D))


class Imputer(nn.Module):
    def __init__(self, channels, dim=32, layers=2, max_len=64):
        super().__init__()
        self.value_proj = nn.Linear(2 * channels, dim)  # values and the observed flags
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.attn = nn.ModuleList([MissingAwareAttention(dim) for _ in range(layers)])
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in range(layers)])
        self.head = nn.Linear(dim, channels)

    def forward(self, x):  # x (B, T, C) with NaN where missing
        observed = ~torch.isnan(x)
        values = torch.where(observed, x, torch.zeros_like(x))
        h = self.value_proj(torch.cat([values, observed.to(x.dtype)], dim=-1)) + self.pos[: x.shape[1]]
        step_observed = observed.any(dim=-1)
        for attn, norm in zip(self.attn, self.norm):
            h = h + attn(norm(h), step_observed)
        return self.head(h)


def make_series(batch=8, steps=24, channels=3, missing=0.3):
    t = torch.arange(steps, dtype=torch.float32)
    phase = torch.rand(batch, 1, channels) * 6.28
    x = torch.sin(t[None, :, None] * 0.4 + phase)
    x[torch.rand_like(x) < missing] = float("nan")
    x[:, 5] = float("nan")  # a whole step lost (sensor outage)
    return x


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Imputer(channels=3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        x = make_series()
        held = ~torch.isnan(x) & (torch.rand_like(x) < 0.2)  # hide some readings, predict them
        pred = model(x.masked_fill(held, float("nan")))
        loss = F.mse_loss(pred[held], x[held])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("held-out MSE", round(loss.item(), 4))
