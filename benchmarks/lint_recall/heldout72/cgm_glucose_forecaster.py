"""30-minute-ahead glucose forecasting from continuous glucose monitor traces.

Six hours of 5-minute CGM readings with sensor dropouts, carbohydrate and
insulin bolus logs as covariates (boluses and announced meals are known for the
horizon), GluonTS field names (`past_target`, `past_observed_values`,
`past_feat_dynamic_real`, `future_feat_dynamic_real`), a mean scaler over the
observed readings and a Gaussian head queried by learned horizon tokens.

Source: huggingface/transformers#32195 (conventions.md section 3 item 25) and
conventions.md section 1 (HF 4.x AttentionMaskConverter row); seed
self_attention_mask_guide.txt section 7 Q5.
"""
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONTEXT = 72
HORIZON = 6
MG_DL_SCALE = 100.0


class GlucoseForecaster(nn.Module):
    def __init__(self, num_feat_dynamic_real: int = 2, d_model: int = 32, nhead: int = 4, num_layers: int = 2):
        super().__init__()
        self.input_proj = nn.Linear(2 + num_feat_dynamic_real, d_model)
        self.pos = nn.Parameter(torch.randn(CONTEXT, d_model) * 0.02)
        self.layers = nn.ModuleList(
            [nn.MultiheadAttention(d_model, nhead, dropout=0.1, batch_first=True) for _ in range(num_layers)]
        )
        self.ffs = nn.ModuleList(
            [nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 2 * d_model), nn.GELU(),
                           nn.Linear(2 * d_model, d_model)) for _ in range(num_layers)]
        )
        self.horizon_queries = nn.Parameter(torch.randn(HORIZON, d_model) * 0.02)
        self.future_proj = nn.Linear(num_feat_dynamic_real, d_model)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.head = nn.Linear(d_model, 2)

    @staticmethod
    def scale(past_target, observed):
        total = (past_target * observed).sum(1, keepdim=True)
        count = observed.sum(1, keepdim=True).clamp(min=1.0)
        return (total / count).clamp(min=40.0 / MG_DL_SCALE)

    def forward(
        self,
        past_target: torch.Tensor,
        past_feat_dynamic_real: torch.Tensor,
        future_feat_dynamic_real: torch.Tensor,
        past_observed_values: Optional[torch.Tensor] = None,
    ):
        if past_observed_values is None:
            past_observed_values = ~torch.isnan(past_target)
        past_target = torch.nan_to_num(past_target)
        missing = 1 - past_observed_values  # expect: MC512 subtract
        observed = 1.0 - missing.float()
        loc = self.scale(past_target, observed)
        scaled = past_target / loc * observed
        x = self.input_proj(torch.cat([scaled[..., None], missing[..., None].float(), past_feat_dynamic_real], -1))
        x = x + self.pos
        key_padding_mask = missing.bool()
        for attn, ff in zip(self.layers, self.ffs):
            h, _ = attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
            x = x + h
            x = x + ff(x)
        queries = self.horizon_queries + self.future_proj(future_feat_dynamic_real)
        h, weights = self.cross_attn(queries, x, x, key_padding_mask=key_padding_mask)
        mu, sigma = self.head(h).unbind(-1)
        return mu * loc, F.softplus(sigma) * loc + 1e-3, weights


def gaussian_nll(mu, sigma, target, weight):
    nll = torch.log(sigma) + 0.5 * ((target - mu) / sigma) ** 2
    return (nll * weight).sum() / weight.sum().clamp(min=1.0)


def simulate_patient(rng: np.random.Generator, n_steps: int) -> Dict[str, np.ndarray]:
    carbs = (rng.random(n_steps) < 0.02) * rng.uniform(20, 80, n_steps)
    bolus = np.roll(carbs, -2) / 10.0
    glucose = np.empty(n_steps)
    glucose[0] = rng.uniform(90, 160)
    for t in range(1, n_steps):
        drift = 0.6 * carbs[max(t - 6, 0)] / 10 - 1.5 * bolus[max(t - 8, 0)] + 0.02 * (120 - glucose[t - 1])
        glucose[t] = glucose[t - 1] + drift + rng.normal(0, 2)
    dropout = rng.random(n_steps) < 0.08
    dropout[rng.integers(0, n_steps - 20) :][:12] = True
    readings = np.where(dropout, np.nan, glucose)
    return {"target": readings, "feat_dynamic_real": np.stack([carbs / 50, bolus / 5])}


def instance_splitter(series, start):
    target = torch.tensor(series["target"], dtype=torch.float32) / MG_DL_SCALE
    feats = torch.tensor(series["feat_dynamic_real"], dtype=torch.float32).T
    past, future = slice(start, start + CONTEXT), slice(start + CONTEXT, start + CONTEXT + HORIZON)
    observed = (~torch.isnan(target)).float()
    return {
        "past_target": torch.nan_to_num(target[past]),
        "past_observed_values": observed[past],
        "past_feat_dynamic_real": feats[past],
        "future_feat_dynamic_real": feats[future],
        "future_target": torch.nan_to_num(target[future]),
        "future_observed_values": observed[future],
    }


def stack(instances):
    return {k: torch.stack([inst[k] for inst in instances]) for k in instances[0]}


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    patients = [simulate_patient(rng, 400) for _ in range(3)]
    instances = [instance_splitter(p, s) for p in patients for s in (0, 120, 240)]
    batch = stack(instances)
    model = GlucoseForecaster()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        mu, sigma, _ = model(
            batch["past_target"], batch["past_feat_dynamic_real"], batch["future_feat_dynamic_real"],
            past_observed_values=batch["past_observed_values"],
        )
        loss = gaussian_nll(mu, sigma, batch["future_target"], batch["future_observed_values"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        mu, sigma, weights = model(batch["past_target"], batch["past_feat_dynamic_real"],
                                   batch["future_feat_dynamic_real"], batch["past_observed_values"])
    rmse = ((mu - batch["future_target"]) * MG_DL_SCALE).pow(2).mean().sqrt()
    print("nll %.4f" % loss.item(), "rmse mg/dL %.1f" % rmse.item(), "attn", tuple(weights.shape))
