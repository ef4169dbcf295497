"""Real-time disruption prediction for a tokamak from 0-D plasma diagnostics.

Each shot is a time series of plasma current, locked-mode amplitude, internal
inductance, q95, Greenwald fraction, radiated-power fraction and beta_N.
Shots end at different times (flat-top end or disruption) and are padded; a
causal transformer emits a disruptivity score every 2 ms and the plasma
control system raises an alarm when it crosses a threshold.

Source: pytorch/pytorch PR #111007 (conventions.md §1 SDPA is_causal row, §2.7)
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SIGNALS = ("ip", "locked_mode", "li", "q95", "greenwald_frac", "prad_frac", "beta_n")
DT_MS = 2.0
WARNING_MS = 40.0

CONFIG = {"d_model": 48, "n_heads": 4, "n_layers": 2, "attn_dropout": 0.0, "threshold": 0.5}


def simulate_shot(g, disruptive):
    n = int(torch.randint(80, 180, (1,), generator=g))
    t = torch.arange(n, dtype=torch.float32)
    x = 0.05 * torch.randn(n, len(SIGNALS), generator=g)
    x[:, 0] += 1.0
    x[:, 2] += 0.9
    x[:, 3] += 3.2
    x[:, 4] += 0.6 + 0.1 * torch.rand(1, generator=g)
    x[:, 5] += 0.4
    x[:, 6] += 1.5
    label = torch.zeros(n)
    if disruptive:
        onset = n - int(torch.randint(25, 45, (1,), generator=g))
        ramp = ((t - onset) / (n - onset)).clamp(min=0.0)
        x[:, 1] += 1.5 * ramp
        x[:, 5] += 0.6 * ramp
        x[:, 2] += 0.3 * ramp
        label[t >= n - WARNING_MS / DT_MS] = 1.0
    return x, label, disruptive


def make_batch(shots):
    n = max(s[0].shape[0] for s in shots)
    x = torch.zeros(len(shots), n, len(SIGNALS))
    y = torch.zeros(len(shots), n)
    keep = torch.zeros(len(shots), n, dtype=torch.bool)
    for i, (xi, yi, _) in enumerate(shots):
        x[i, : len(xi)] = xi
        y[i, : len(yi)] = yi
        keep[i, : len(xi)] = True
    return x, y, keep


class CausalAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_dropout = attn_dropout

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, keep[:, None, None, :] & torch.ones(t, t, dtype=torch.bool, device=x.device).tril(), self.attn_dropout if self.training else 0.0, False)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalAttention(d_model, n_heads, attn_dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, keep):
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class DisruptionPredictor(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.inp = nn.Linear(len(SIGNALS), d)
        self.register_buffer("freq", torch.exp(-math.log(1e4) * torch.arange(0, d, 2) / d), persistent=False)
        self.blocks = nn.ModuleList(Block(d, cfg["n_heads"], cfg["attn_dropout"]) for _ in range(cfg["n_layers"]))
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, 1)

    def forward(self, x, keep):
        t = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)[:, None] * self.freq
        h = self.inp(x) + torch.cat([t.sin(), t.cos()], dim=-1)
        for block in self.blocks:
            h = block(h, keep)
        return self.out(self.ln(h)).squeeze(-1)


@torch.no_grad()
def shot_metrics(model, shots, threshold):
    model.eval()
    x, _, keep = make_batch(shots)
    alarm = (torch.sigmoid(model(x, keep)) > threshold) & keep
    fired = alarm.any(dim=1)
    disruptive = torch.tensor([s[2] for s in shots])
    tpr = (fired & disruptive).sum().item() / max(disruptive.sum().item(), 1)
    fpr = (fired & ~disruptive).sum().item() / max((~disruptive).sum().item(), 1)
    return tpr, fpr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--attn-dropout", type=float, default=CONFIG["attn_dropout"])
    args = parser.parse_args()
    cfg = dict(CONFIG, attn_dropout=args.attn_dropout)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    train = [simulate_shot(g, bool(i % 3 == 0)) for i in range(240)]
    test = [simulate_shot(g, bool(i % 3 == 0)) for i in range(90)]
    model = DisruptionPredictor(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        model.train()
        for i in range(0, len(train), 24):
            x, y, keep = make_batch(train[i : i + 24])
            logits = model(x, keep)
            loss = F.binary_cross_entropy_with_logits(logits[keep], y[keep], pos_weight=torch.tensor(5.0))
            opt.zero_grad()
            loss.backward()
            opt.step()
        tpr, fpr = shot_metrics(model, test, cfg["threshold"])
        print(f"epoch {epoch} loss {loss.item():.3f} TPR {tpr:.2f} FPR {fpr:.2f}")


if __name__ == "__main__":
    main()
