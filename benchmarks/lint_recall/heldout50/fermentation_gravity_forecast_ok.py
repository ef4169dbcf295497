"""Days to terminal gravity from floating-hydrometer logs (homebrew club notebook export).

Tilt-style hydrometers report specific gravity and wort temperature every hour; the model
reads the recent history of a batch and forecasts how many days remain until fermentation
finishes. Readings attend to the last two days only; the dashboard cell asks for shorter
look-backs when a batch was disturbed by dry hopping.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 注意: 张量共享内存风险)
"""

# %%
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(12)

HOURS, WINDOW = 72, 48


def simulate(n):
    t = torch.arange(HOURS).float() / 24
    rate = 0.3 + torch.rand(n, 1)
    og = 1.045 + 0.02 * torch.rand(n, 1)
    fg = 1.008 + 0.004 * torch.rand(n, 1)
    gravity = fg + (og - fg) * torch.exp(-rate * t) + 0.0005 * torch.randn(n, HOURS)
    temp = 19 + torch.randn(n, 1) + 0.3 * torch.randn(n, HOURS)
    x = torch.stack([(gravity - 1.0) * 100, temp / 20], -1)
    days_left = torch.log((og - fg) / 0.002).squeeze(-1) / rate.squeeze(-1) - t[-1]
    return x, days_left.clamp(min=0)


x_train, y_train = simulate(512)
x_test, y_test = simulate(128)

# %%
class GravityForecaster(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.inp = nn.Linear(2, d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.head = nn.Linear(d, 1)
        lag = torch.arange(HOURS)[:, None] - torch.arange(HOURS)[None, :]
        self.register_buffer("lag", lag)
        self.register_buffer("bias", torch.zeros(HOURS, HOURS).masked_fill((lag < 0) | (lag >= WINDOW), float("-inf")))

    def forward(self, x, max_lag=WINDOW):
        h = self.inp(x)
        bias = self.bias.masked_fill(self.lag >= max_lag, float("-inf"))
        out, _ = self.attn(h, h, h, attn_mask=bias, need_weights=False)
        return self.head(out[:, -1]).squeeze(-1)


model = GravityForecaster()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)

# %%
for epoch in range(40):
    loss = F.mse_loss(model(x_train), y_train)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("train MSE", loss.item())

# %%
model.eval()
with torch.no_grad():
    dry_hopped = model(x_test[:4], max_lag=6)
    print("dry-hopped batches:", [round(v, 2) for v in dry_hopped.tolist()])
    mae = (model(x_test) - y_test).abs().mean()
print("test MAE (days)", mae.item())
torch.save(model.state_dict(), "/tmp/gravity_forecaster.pt")
