"""Short-term forecasting of influenza-like illness (ILI) from ILINet-style surveillance.

Weekly weighted ILI percentages of the ten HHS regions enter a decoder-only
transformer that forecasts one to four weeks ahead, as in the FluSight
challenge. Regions joined the reporting network in different weeks, so
histories are left-padded; the attention is written out with an additive
bias, as in Hugging Face 4.x decoders.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3 items 15 and 16)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

REGIONS = [f"HHS Region {i}" for i in range(1, 11)]
SEASON_WEEKS = 33
HORIZONS = 4


def ilinet_seasons(n_seasons, seed=0):
    g = torch.Generator().manual_seed(seed)
    weeks = torch.arange(SEASON_WEEKS, dtype=torch.float32)
    series, start = [], []
    for _ in range(n_seasons):
        for r in range(len(REGIONS)):
            peak_week = 14 + 6 * torch.rand(1, generator=g) + 0.4 * r
            height = 2.0 + 4.0 * torch.rand(1, generator=g)
            width = 3.0 + 2.0 * torch.rand(1, generator=g)
            ili = 1.0 + height * torch.exp(-0.5 * ((weeks - peak_week) / width) ** 2)
            ili = ili * (1 + 0.05 * torch.randn(SEASON_WEEKS, generator=g))
            series.append(ili)
            start.append(int(torch.randint(0, 10, (1,), generator=g)))
    series = torch.stack(series)
    keep = torch.arange(SEASON_WEEKS)[None, :] >= torch.tensor(start)[:, None]
    return series.masked_fill(~keep, 0.0), keep


class EagerAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, bias):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias
        weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, d))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(dim)
        self.self_attn = EagerAttention(dim, heads)
        self.post_attention_layernorm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, bias):
        x = x + self.self_attn(self.input_layernorm(x), bias)
        return x + self.mlp(self.post_attention_layernorm(x))


class ILIForecaster(nn.Module):
    def __init__(self, dim=48, heads=4, layers=2):
        super().__init__()
        self.value_proj = nn.Linear(2, dim)
        self.week_embed = nn.Embedding(SEASON_WEEKS + HORIZONS, dim)
        self.region_embed = nn.Embedding(len(REGIONS), dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1)

    def _prepare_bias(self, keep, dtype):
        t = keep.shape[1]
        min_value = torch.finfo(dtype).min
        causal = torch.triu(torch.full((t, t), min_value, dtype=dtype, device=keep.device), diagonal=1)
        padding = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, min_value)[:, None, None, :]
        return causal[None, None] + padding  # expect: MC513 method

    def forward(self, ili, keep, region):
        x = torch.stack([ili.log1p(), keep.float()], dim=-1)
        weeks = torch.arange(ili.shape[1], device=ili.device)
        h = self.value_proj(x) + self.week_embed(weeks) + self.region_embed(region)[:, None]
        bias = self._prepare_bias(keep, h.dtype)
        for layer in self.layers:
            h = layer(h, bias)
        return self.head(self.norm(h)).squeeze(-1).expm1()

    @torch.no_grad()
    def forecast(self, ili, keep, region, horizons=HORIZONS):
        ili, keep = ili.clone(), keep.clone()
        preds = []
        for _ in range(horizons):
            nxt = self(ili, keep, region)[:, -1:]
            preds.append(nxt)
            ili = torch.cat([ili, nxt], dim=1)
            keep = torch.cat([keep, torch.ones_like(keep[:, :1])], dim=1)
        return torch.cat(preds, dim=1)


def main():
    torch.manual_seed(0)
    train, train_keep = ilinet_seasons(40, seed=1)
    test, test_keep = ilinet_seasons(5, seed=2)
    train_region = torch.arange(len(train)) % len(REGIONS)
    test_region = torch.arange(len(test)) % len(REGIONS)
    model = ILIForecaster()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(8):
        model.train()
        perm = torch.randperm(len(train))
        for i in range(0, len(train), 40):
            idx = perm[i : i + 40]
            x, keep, region = train[idx, :-1], train_keep[idx, :-1], train_region[idx]
            pred = model(x, keep, region)
            target_ok = keep & train_keep[idx, 1:]
            loss = F.l1_loss(pred[target_ok], train[idx, 1:][target_ok])
            opt.zero_grad()
            loss.backward()
            opt.step()
        cut = SEASON_WEEKS - HORIZONS
        pred = model.forecast(test[:, :cut], test_keep[:, :cut], test_region)
        mae = (pred - test[:, cut:]).abs().mean(0)
        print(f"epoch {epoch} loss {loss.item():.3f} MAE by horizon " + " ".join(f"{m:.2f}" for m in mae.tolist()))


if __name__ == "__main__":
    main()
