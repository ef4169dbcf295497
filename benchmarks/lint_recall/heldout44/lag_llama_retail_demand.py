"""Store-item demand forecasting with a decoder-only model in the layout of
time-series-foundation-models/lag-llama.

``LTSMConfig``, ``RMSNorm``, ``CausalSelfAttention`` with ``use_kv_cache`` and a ``kv_cache``
attribute, ``Block``, ``LagLlamaModel`` with ``transformer.wte`` / ``transformer.h`` /
``transformer.ln_f``, lagged inputs plus day-of-week features, a masked mean scaler over the
observed days and a Student-t head; sampled paths are generated step by step through the cache.
Daily unit sales with weekly seasonality, promotions and stock-out days that are not observed.

Source: conventions.md section 1 (SDPA is_causal row) and section 2.7; pytorch/pytorch PR #111007
(conventions.md section 1).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import StudentT

LAGS = [1, 2, 3, 7, 14]


@dataclass
class LTSMConfig:
    context_length: int = 28
    prediction_length: int = 7
    n_layer: int = 2
    n_head: int = 4
    n_embd_per_head: int = 12
    dropout: float = 0.0

    @property
    def feature_size(self):
        return len(LAGS) + 7 + 2


def simulate_demand(n_series, n_days, gen):
    base = torch.exp(torch.randn(n_series, 1, generator=gen) * 0.6 + 2.5)
    day = torch.arange(n_days)
    weekly = 1.0 + 0.35 * torch.sin(2 * math.pi * (day[None] + torch.randint(0, 7, (n_series, 1), generator=gen)) / 7)
    promo = (torch.rand(n_series, n_days, generator=gen) < 0.08).float()
    rate = base * weekly * (1.0 + 0.8 * promo) * (1.0 + 0.002 * day[None])
    sales = torch.poisson(rate, generator=gen)
    observed = (torch.rand(n_series, n_days, generator=gen) > 0.03).float()
    return sales * observed, observed


class RMSNorm(nn.Module):
    def __init__(self, size, eps=1e-5):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return self.scale * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config.n_embd_per_head * config.n_head
        self.q_proj = nn.Linear(d, d, bias=False)
        self.kv_proj = nn.Linear(d, 2 * d, bias=False)
        self.c_proj = nn.Linear(d, d, bias=False)
        self.n_head, self.dropout = config.n_head, config.dropout
        self.kv_cache = None

    def forward(self, x, use_kv_cache):
        B, T, C = x.size()
        q = self.q_proj(x).view(B, T, self.n_head, -1).transpose(1, 2)
        k, v = self.kv_proj(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, -1).transpose(1, 2)
        v = v.view(B, T, self.n_head, -1).transpose(1, 2)
        if use_kv_cache:
            if self.kv_cache is not None:
                prev_k, prev_v = self.kv_cache
                k = torch.cat([prev_k, k], dim=2)
                v = torch.cat([prev_v, v], dim=2)
            self.kv_cache = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True)  # expect: MC510 cache
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config.n_embd_per_head * config.n_head
        self.rms_1, self.rms_2 = RMSNorm(d), RMSNorm(d)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    def forward(self, x, use_kv_cache):
        x = x + self.attn(self.rms_1(x), use_kv_cache)
        return x + self.mlp(self.rms_2(x))


class LagLlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        d = config.n_embd_per_head * config.n_head
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Linear(config.feature_size, d),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=RMSNorm(d),
            )
        )
        self.param_proj = nn.Linear(d, 3)

    @staticmethod
    def scaler(values, observed):
        loc = (values * observed).sum(1, keepdim=True) / observed.sum(1, keepdim=True).clamp(min=1.0)
        scale = ((values - loc).abs() * observed).sum(1, keepdim=True) / observed.sum(1, keepdim=True).clamp(min=1.0)
        return loc, scale.clamp(min=1e-3)

    def prepare_input(self, scaled, start, end, day_offset, loc, scale):
        lagged = torch.stack([scaled[:, start - lag : end - lag] for lag in LAGS], -1)
        dow = F.one_hot((day_offset[:, None] + torch.arange(start, end)) % 7, 7).float()
        stats = torch.cat([loc.log1p(), scale.log()], -1)[:, None].expand(-1, end - start, -1)
        return torch.cat([lagged, dow, stats], -1)

    def forward(self, features, use_kv_cache=False):
        x = self.transformer.wte(features)
        for block in self.transformer.h:
            x = block(x, use_kv_cache)
        df, loc, scale = self.param_proj(self.transformer.ln_f(x)).unbind(-1)
        return 2.0 + F.softplus(df), loc, F.softplus(scale) + 1e-3

    def reset_cache(self):
        for block in self.transformer.h:
            block.attn.kv_cache = None

    def loss(self, past_target, past_observed, day_offset):
        ctx = self.config.context_length
        loc, scale = self.scaler(past_target[:, max(LAGS) : max(LAGS) + ctx], past_observed[:, max(LAGS) : max(LAGS) + ctx])
        scaled = (past_target - loc) / scale
        feats = self.prepare_input(scaled, max(LAGS), scaled.size(1), day_offset, loc, scale)
        df, mu, sigma = self(feats)
        nll = -StudentT(df, mu, sigma).log_prob(scaled[:, max(LAGS) :])
        weights = past_observed[:, max(LAGS) :]
        return (nll * weights).sum() / weights.sum()

    @torch.no_grad()
    def generate(self, past_target, past_observed, day_offset, num_samples=20, use_kv_cache=True):
        cfg = self.config
        loc, scale = self.scaler(past_target[:, -cfg.context_length :], past_observed[:, -cfg.context_length :])
        scaled = ((past_target - loc) / scale).repeat_interleave(num_samples, 0)
        loc_r, scale_r = loc.repeat_interleave(num_samples, 0), scale.repeat_interleave(num_samples, 0)
        day_r = day_offset.repeat_interleave(num_samples, 0)
        self.reset_cache()
        start = scaled.size(1) - cfg.context_length
        for step in range(cfg.prediction_length):
            end = scaled.size(1) + 1
            scaled = torch.cat([scaled, torch.zeros_like(scaled[:, :1])], 1)
            first = start if (step == 0 or not use_kv_cache) else end - 1
            df, mu, sigma = self(self.prepare_input(scaled, first, end, day_r, loc_r, scale_r), use_kv_cache)
            scaled[:, -1] = StudentT(df[:, -1], mu[:, -1], sigma[:, -1]).sample()
        self.reset_cache()
        paths = scaled[:, -cfg.prediction_length :] * scale_r + loc_r
        return paths.clamp(min=0).view(-1, num_samples, cfg.prediction_length)


def mase(forecast, actual, history):
    naive = (history[:, 7:] - history[:, :-7]).abs().mean(1).clamp(min=1e-3)
    return ((forecast - actual).abs().mean(1) / naive).mean().item()


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    cfg = LTSMConfig()
    sales, observed = simulate_demand(64, 200, gen)
    model = LagLlamaModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    window = max(LAGS) + cfg.context_length + cfg.prediction_length
    for step in range(300):
        series = torch.randint(0, 64, (32,))
        start = torch.randint(0, 200 - 14 - window, (32,))
        idx = start[:, None] + torch.arange(window)
        loss = model.loss(sales[series[:, None], idx], observed[series[:, None], idx], start)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1} nll {loss.item():.3f}")
    model.eval()
    cut = 200 - cfg.prediction_length
    history, actual = sales[:, :cut], sales[:, cut:]
    offset = torch.zeros(64, dtype=torch.long)
    for use_cache in (True, False):
        torch.manual_seed(1)
        paths = model.generate(history, observed[:, :cut], offset, use_kv_cache=use_cache)
        print(f"use_kv_cache={use_cache}: MASE of the median {mase(paths.median(1).values, actual, history):.3f}")


if __name__ == "__main__":
    main()
