"""Battery state-of-health (SOH) estimation from charge/discharge cycle summaries, Lightning.

Every cell contributes its most recent cycles (capacity, internal resistance, mean temperature,
charge time, voltage curve statistics). Cells have different numbers of logged cycles, so the
batch is padded and ``cycle_keep`` marks real cycles; missing sensor readings are zero-filled and
flagged. A callback keeps the best validation RMSE for the model card.

Source: TransformerLensOrg/TransformerLens PR #366 (fixes #318) (conventions.md section 3 item 20), conventions.md section 2.3
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from lightning import Callback, LightningModule
except ImportError:
    class LightningModule(nn.Module):
        def log(self, *args, **kwargs):
            pass

    class Callback:
        pass

FEATURES = ("capacity_ah", "ir_mohm", "temp_c", "charge_min", "v_mean", "v_std", "dq_dv_peak")


class CycleAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _shape(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden, cycle_keep):
        q, k, v = self._shape(self.q_proj(hidden)), self._shape(self.k_proj(hidden)), self._shape(self.v_proj(hidden))
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(cycle_keep[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        probs = self.dropout(F.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2).flatten(2)
        return self.o_proj(ctx)


class SOHRegressor(LightningModule):
    def __init__(self, d_model=48, n_heads=4, n_layers=2, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.inp = nn.Linear(2 * len(FEATURES), d_model)
        self.age = nn.Linear(1, d_model)
        self.attn = nn.ModuleList(CycleAttention(d_model, n_heads, 0.1) for _ in range(n_layers))
        self.ff = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1)

    def forward(self, cycles, present, cycle_index, cycle_keep):
        x = torch.cat([cycles * present, present.float()], dim=-1)
        h = self.inp(x) + self.age(torch.log1p(cycle_index.float()).unsqueeze(-1))
        for attn, ff in zip(self.attn, self.ff):
            h = h + attn(self.norm(h), cycle_keep)
            h = h + ff(h)
        last = cycle_keep.long().sum(1) - 1
        final = h[torch.arange(h.size(0)), last]
        return torch.sigmoid(self.head(final)).squeeze(-1)

    def _step(self, batch):
        pred = self(batch["cycles"], batch["present"], batch["cycle_index"], batch["cycle_keep"])
        return pred, F.mse_loss(pred, batch["soh"])

    def training_step(self, batch, batch_idx):
        _, loss = self._step(batch)
        self.log("train/mse", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        pred, loss = self._step(batch)
        rmse = loss.sqrt()
        self.log("val/rmse", rmse, prog_bar=True)
        return rmse

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=200)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class BestRMSECallback(Callback):
    def __init__(self):
        self.best = math.inf

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.best = min(self.best, float(outputs))


def make_cells(n_cycles=(30, 18, 24), seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t = len(n_cycles), max(n_cycles)
    cycle_keep = torch.arange(t)[None, :] < torch.tensor(n_cycles)[:, None]
    cycle_index = torch.arange(t).repeat(b, 1) * 10 + torch.randint(0, 500, (b, 1), generator=g)
    fade = 1.0 - 2e-4 * cycle_index.float()
    cycles = torch.randn(b, t, len(FEATURES), generator=g) * 0.1
    cycles[..., 0] += fade
    present = (torch.rand(b, t, len(FEATURES), generator=g) > 0.05) & cycle_keep[..., None]
    last = torch.tensor(n_cycles) - 1
    soh = fade[torch.arange(b), last].clamp(0.5, 1.0)
    return {"cycles": cycles * cycle_keep[..., None], "present": present, "cycle_index": cycle_index * cycle_keep,
            "cycle_keep": cycle_keep, "soh": soh}


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SOHRegressor()
    opt = model.configure_optimizers()["optimizer"]
    for step in range(5):
        loss = model.training_step(make_cells(seed=step), step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    cb = BestRMSECallback()
    model.eval()
    with torch.no_grad():
        for i in range(2):
            cb.on_validation_batch_end(None, model, model.validation_step(make_cells(seed=100 + i), i), None, i)
    print(f"train mse {loss.item():.5f} best val rmse {cb.best:.4f}")
    assert math.isfinite(cb.best)
