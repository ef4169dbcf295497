"""Coffee roast curve forecaster (Hub remote code: configuration and modeling in one file).

Reads the logged curve of a drum roast (bean and environment temperature, gas, airflow, drum
speed, one row every 2 s) and forecasts the rate of rise and the chance of first crack at the
next step; `rollout` runs it forward under a planned gas profile. Half of the heads are local,
with a learned distance bias cut off beyond `local_window` steps.

Source: seed masked_fill_inplace.txt
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

CHANNELS = ["bean_temp", "env_temp", "gas", "airflow", "drum_rpm"]


class RoastConfig(PretrainedConfig):
    model_type = "roast_forecaster"

    def __init__(self, n_channels=len(CHANNELS), d_model=64, n_heads=4, n_layers=2, local_heads=2,
                 local_window=16, max_distance=256, **kwargs):
        self.n_channels = n_channels
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.local_heads = local_heads
        self.local_window = local_window
        self.max_distance = max_distance
        super().__init__(**kwargs)


class RoastAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.d_model // config.n_heads
        self.max_distance = config.max_distance
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.rel_bias = nn.Parameter(torch.zeros(config.n_heads, config.max_distance))
        beyond = torch.arange(config.max_distance)[None, :] >= config.local_window
        local = torch.arange(config.n_heads)[:, None] < config.local_heads
        self.register_buffer("beyond_window", beyond & local, persistent=False)

    def _distance_bias(self, t):
        idx = torch.arange(t, device=self.rel_bias.device)
        dist = (idx[:, None] - idx[None, :]).clamp(0, self.max_distance - 1)
        table = self.rel_bias.masked_fill_(self.beyond_window, float("-inf"))  # expect: MC505 parameter
        return table[:, dist]

    def forward(self, x, step_keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + self._distance_bias(t)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(future | ~step_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class RoastBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attn = RoastAttention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                 nn.Linear(4 * config.d_model, config.d_model))

    def forward(self, x, step_keep):
        x = x + self.attn(self.norm1(x), step_keep)
        return x + self.mlp(self.norm2(x))


class RoastForecaster(PreTrainedModel):
    config_class = RoastConfig
    base_model_prefix = "roast"

    def __init__(self, config):
        super().__init__(config)
        self.input_proj = nn.Linear(config.n_channels, config.d_model)
        self.blocks = nn.ModuleList([RoastBlock(config) for _ in range(config.n_layers)])
        self.norm = nn.LayerNorm(config.d_model)
        self.ror_head = nn.Linear(config.d_model, 1)
        self.crack_head = nn.Linear(config.d_model, 1)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)

    def forward(self, curves, step_keep=None, next_ror=None, crack=None):
        if step_keep is None:
            step_keep = torch.ones(curves.shape[:2], dtype=torch.bool, device=curves.device)
        x = self.input_proj(curves)
        for block in self.blocks:
            x = block(x, step_keep)
        x = self.norm(x)
        ror = self.ror_head(x).squeeze(-1)
        crack_logits = self.crack_head(x).squeeze(-1)
        loss = None
        if next_ror is not None:
            loss = F.mse_loss(ror[step_keep], next_ror[step_keep])
            loss = loss + F.binary_cross_entropy_with_logits(crack_logits[step_keep], crack[step_keep])
        return {"loss": loss, "ror": ror, "crack_logits": crack_logits}


@torch.no_grad()
def rollout(model, history, gas_plan, dt=2.0):
    model.eval()
    curve = history.clone()
    crack_at = None
    for step, gas in enumerate(gas_plan):
        out = model(curve[None])
        ror = float(out["ror"][0, -1])
        if crack_at is None and torch.sigmoid(out["crack_logits"][0, -1]) > 0.5:
            crack_at = step
        nxt = curve[-1].clone()
        nxt[0] = nxt[0] + ror * dt / 60.0
        nxt[2] = gas
        curve = torch.cat([curve, nxt[None]])
    return curve[len(history):, 0], crack_at


def train_step(model, optimizer, batch):
    model.train()
    loss = model(**batch)["loss"]
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = RoastForecaster(RoastConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    curves = torch.randn(4, 40, len(CHANNELS))
    step_keep = torch.arange(40)[None, :] < torch.tensor([40, 36, 30, 25])[:, None]
    batch = {"curves": curves, "step_keep": step_keep, "next_ror": torch.randn(4, 40),
             "crack": (torch.rand(4, 40) > 0.9).float()}
    print(train_step(model, optimizer, batch))
    temps, crack_at = rollout(model, curves[0, :20], gas_plan=[0.6] * 10)
    print(temps.shape, crack_at)
