"""Decoder-only patched forecaster for e-commerce SKU demand (TimesFM-style).

Daily unit sales per SKU, contexts padded at the start for SKUs listed recently
(`paddings` is 1.0 on padded days, as in TimesFM), input patches of 8 days,
output patches of 16 days with quantile heads, instance normalisation from the
unpadded context, and autoregressive decoding patch by patch.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7 and
section 5 item 8; pytorch/pytorch PR #111007.
"""
import math
from dataclasses import dataclass, field
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TimesFMConfig:
    patch_len: int = 8
    output_patch_len: int = 16
    model_dims: int = 32
    num_heads: int = 4
    num_layers: int = 2
    dropout: float = 0.1
    quantiles: Tuple[float, ...] = field(default=(0.1, 0.5, 0.9))
    tolerance: float = 1e-6


class ResidualBlock(nn.Module):
    def __init__(self, input_dims, hidden_dims, output_dims):
        super().__init__()
        self.hidden_layer = nn.Sequential(nn.Linear(input_dims, hidden_dims), nn.SiLU())
        self.output_layer = nn.Linear(hidden_dims, output_dims)
        self.residual_layer = nn.Linear(input_dims, output_dims)

    def forward(self, x):
        return self.output_layer(self.hidden_layer(x)) + self.residual_layer(x)


def positional_embedding(seq_length, dims, device=None):
    position = torch.arange(seq_length, dtype=torch.float32, device=device)[:, None]
    inv_timescales = torch.exp(torch.arange(0, dims, 2, device=device) * (-math.log(10000.0) / dims))
    scaled = position * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=-1)


def masked_mean_std(inputs, paddings, tolerance):
    weight = 1.0 - paddings
    count = weight.sum(-1, keepdim=True).clamp(min=1.0)
    mean = (inputs * weight).sum(-1, keepdim=True) / count
    var = ((inputs - mean) ** 2 * weight).sum(-1, keepdim=True) / count
    return mean, var.sqrt().clamp(min=tolerance)


class StackedDecoderLayer(nn.Module):
    def __init__(self, cfg: TimesFMConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.input_norm = nn.RMSNorm(cfg.model_dims)
        self.qkv_proj = nn.Linear(cfg.model_dims, 3 * cfg.model_dims)
        self.o_proj = nn.Linear(cfg.model_dims, cfg.model_dims)
        self.mlp_norm = nn.RMSNorm(cfg.model_dims)
        self.mlp = nn.Sequential(nn.Linear(cfg.model_dims, 2 * cfg.model_dims), nn.GELU(), nn.Dropout(cfg.dropout),
                                 nn.Linear(2 * cfg.model_dims, cfg.model_dims))

    def forward(self, hidden_states, keep):
        b, n, d = hidden_states.shape
        qkv = self.qkv_proj(self.input_norm(hidden_states)).view(b, n, 3, self.num_heads, d // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep & torch.ones(n, n, dtype=torch.bool, device=q.device).tril())
        hidden_states = hidden_states + self.o_proj(attn.transpose(1, 2).reshape(b, n, d))
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))


class PatchedDecoder(nn.Module):
    def __init__(self, cfg: TimesFMConfig):
        super().__init__()
        self.cfg = cfg
        self.input_ff_layer = ResidualBlock(2 * cfg.patch_len, cfg.model_dims, cfg.model_dims)
        self.layers = nn.ModuleList([StackedDecoderLayer(cfg) for _ in range(cfg.num_layers)])
        n_out = cfg.output_patch_len * (1 + len(cfg.quantiles))
        self.horizon_ff_layer = ResidualBlock(cfg.model_dims, cfg.model_dims, n_out)

    def forward(self, input_ts, input_padding):
        cfg = self.cfg
        b, t = input_ts.shape
        mu, sigma = masked_mean_std(input_ts, input_padding, cfg.tolerance)
        normed = (input_ts - mu) / sigma * (1.0 - input_padding)
        patched_inputs = normed.view(b, t // cfg.patch_len, cfg.patch_len)
        patched_pads = input_padding.view(b, t // cfg.patch_len, cfg.patch_len)
        x = self.input_ff_layer(torch.cat([patched_inputs, patched_pads], dim=-1))
        patched_padding = torch.min(patched_pads, dim=-1)[0]
        x = x + positional_embedding(x.shape[1], cfg.model_dims, x.device)
        keep = (patched_padding == 0)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, keep)
        out = self.horizon_ff_layer(x).view(b, x.shape[1], cfg.output_patch_len, 1 + len(cfg.quantiles))
        return out * sigma[..., None, None] + mu[..., None, None], patched_padding

    @torch.no_grad()
    def decode(self, input_ts, paddings, horizon_len):
        steps = math.ceil(horizon_len / self.cfg.output_patch_len)
        ts, pads, forecast = input_ts, paddings, []
        for _ in range(steps):
            out, _ = self(ts, pads)
            nxt = out[:, -1, :, 0]
            forecast.append(nxt)
            ts = torch.cat([ts, nxt], dim=1)[:, nxt.shape[1] :]
            pads = torch.cat([pads, torch.zeros_like(nxt)], dim=1)[:, nxt.shape[1] :]
        return torch.cat(forecast, dim=1)[:, :horizon_len]


def quantile_loss(pred, target, weight, quantiles):
    losses = []
    for i, q in enumerate(quantiles):
        err = target - pred[..., i + 1]
        losses.append(torch.max(q * err, (q - 1) * err))
    point = (pred[..., 0] - target) ** 2
    total = point + torch.stack(losses, -1).sum(-1)
    return (total * weight).sum() / weight.sum().clamp(min=1.0)


def next_patch_targets(series, paddings, patch_len, output_patch_len):
    b, t = series.shape
    n = t // patch_len
    idx = (torch.arange(n)[:, None] + 1) * patch_len + torch.arange(output_patch_len)[None, :]
    valid = idx < t
    idx = idx.clamp(max=t - 1)
    target = series[:, idx]
    weight = (1.0 - paddings[:, idx]) * valid
    return target, weight


def start_padded_sales(lengths, total, patch_len):
    series = torch.zeros(len(lengths), total)
    paddings = torch.ones(len(lengths), total)
    for i, n in enumerate(lengths):
        n = n // patch_len * patch_len
        level = torch.rand(()) * 20
        weekly = 3 * torch.sin(torch.arange(n) * 2 * math.pi / 7)
        series[i, total - n :] = (level + weekly + torch.randn(n)).clamp(min=0)
        paddings[i, total - n :] = 0.0
    return series, paddings


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = TimesFMConfig()
    series, paddings = start_padded_sales([96, 64, 40, 96], total=96, patch_len=cfg.patch_len)
    model = PatchedDecoder(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    target, weight = next_patch_targets(series, paddings, cfg.patch_len, cfg.output_patch_len)
    for step in range(5):
        out, patched_padding = model(series, paddings)
        weight_step = weight * (patched_padding == 0)[..., None]
        loss = quantile_loss(out, target, weight_step, cfg.quantiles)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    forecast = model.decode(series[:, :80], paddings[:, :80], horizon_len=24)
    print("loss %.4f" % loss.item(), "forecast", tuple(forecast.shape), bool(torch.isfinite(forecast).all()))
