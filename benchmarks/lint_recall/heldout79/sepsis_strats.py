"""Early sepsis prediction from ICU stays with a STraTS-style triplet transformer.

Every observation is a triplet (hours since admission, variable, value), so
irregular sampling needs no imputation: triplets are embedded with continuous
value embeddings (CVE), contextualised with self-attention over the stay's
triplets (padded per batch), pooled with a fusion self-attention and joined
with static demographics.  Forecasting pretraining predicts the next window's
values where they are observed.  Stays arrive either as preprocessed triplets
or as raw hourly grids with NaN for unmeasured values (PhysioNet 2019 .psv).

Source: huggingface/transformers#32195 (conventions.md §3 item 25; the `1 - mask` inversion), conventions.md §1 (HF 4.x AttentionMaskConverter row), §4.1 (huggingface/transformers#32113, boolean masks).
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VARIABLES = ("HR", "O2Sat", "Temp", "SBP", "MAP", "Resp", "WBC", "Lactate", "Creatinine", "Platelets")
N_DEMO = 5


class CVE(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, int(d ** 0.5)), nn.Tanh(), nn.Linear(int(d ** 0.5), d, bias=False))

    def forward(self, x):
        return self.net(x.unsqueeze(-1))


class TripletEncoder(nn.Module):
    def __init__(self, d=64, heads=4, layers=2, dropout=0.1):
        super().__init__()
        self.var_emb = nn.Embedding(len(VARIABLES) + 1, d, padding_idx=0)
        self.val_cve = CVE(d)
        self.time_cve = CVE(d)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout, batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.fusion = nn.Linear(d, 1)

    def forward(self, times, variables, values, triplet_keep):
        e = self.var_emb(variables) + self.val_cve(values) + self.time_cve(times)
        c = self.transformer(e, src_key_padding_mask=~triplet_keep)
        a = self.fusion(torch.tanh(c)).squeeze(-1)
        a = a.masked_fill(~triplet_keep, float("-inf"))
        return (torch.softmax(a, dim=-1).unsqueeze(-1) * c).sum(1), c


class STraTS(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.encoder = TripletEncoder(d)
        self.demo = nn.Sequential(nn.Linear(N_DEMO + 1, 2 * d), nn.Tanh(), nn.Linear(2 * d, d))
        self.forecast = nn.Linear(2 * d, len(VARIABLES))
        self.cls = nn.Linear(2 * d, 1)

    def forward(self, batch):
        pooled, _ = self.encoder(batch["times"], batch["variables"], batch["values"], batch["triplet_keep"])
        demo = torch.cat([batch["demo"], batch["missing_rate"][:, None]], dim=-1)
        h = torch.cat([pooled, self.demo(demo)], dim=-1)
        return self.cls(h).squeeze(-1), self.forecast(h)


def forecast_loss(pred, target, target_observed):
    w = target_observed.to(pred.dtype)
    return ((pred - target) ** 2 * w).sum() / w.sum().clamp(min=1.0)


def triplets_from_grid(grid, demo, max_triplets=64):
    b, t, v = grid.shape
    observed = ~torch.isnan(grid)
    missing_rate = (1 - observed).float().mean(dim=(1, 2))  # expect: MC512 observed
    hours = torch.arange(t, dtype=torch.float).view(1, t, 1).expand(b, t, v)
    var_ids = torch.arange(1, v + 1).view(1, 1, v).expand(b, t, v)
    rows = []
    for i in range(b):
        sel = observed[i]
        rows.append((hours[i][sel][-max_triplets:], var_ids[i][sel][-max_triplets:],
                     torch.nan_to_num(grid[i])[sel][-max_triplets:]))
    n = max(len(r[0]) for r in rows)
    batch = {"times": torch.zeros(b, n), "variables": torch.zeros(b, n, dtype=torch.long),
             "values": torch.zeros(b, n), "triplet_keep": torch.zeros(b, n, dtype=torch.bool)}
    for i, (tt, vv, xx) in enumerate(rows):
        batch["times"][i, :len(tt)] = tt / t
        batch["variables"][i, :len(tt)] = vv
        batch["values"][i, :len(tt)] = xx
        batch["triplet_keep"][i, :len(tt)] = True
    batch["demo"] = demo
    batch["missing_rate"] = missing_rate
    return batch


def random_triplets(lengths, generator):
    b, n = len(lengths), max(lengths)
    keep = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    return {
        "times": torch.rand(b, n, generator=generator).sort(-1).values * keep,
        "variables": torch.randint(1, len(VARIABLES) + 1, (b, n), generator=generator) * keep,
        "values": torch.randn(b, n, generator=generator) * keep,
        "triplet_keep": keep,
        "demo": torch.randn(b, N_DEMO, generator=generator),
        "missing_rate": 1.0 - torch.tensor(lengths, dtype=torch.float) / (24 * len(VARIABLES)),
    }


def random_grid(b, hours, generator, p_obs=0.3):
    grid = torch.randn(b, hours, len(VARIABLES), generator=generator)
    grid[torch.rand(b, hours, len(VARIABLES), generator=generator) > p_obs] = float("nan")
    return grid


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = STraTS()
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    batch = random_triplets([40, 23, 31, 12], g)
    y = torch.tensor([1.0, 0.0, 0.0, 1.0])
    target = torch.randn(4, len(VARIABLES), generator=g)
    target_observed = torch.rand(4, len(VARIABLES), generator=g) < 0.5
    for step in range(5):
        logit, fc = model(batch)
        loss = F.binary_cross_entropy_with_logits(logit, y) + forecast_loss(fc, target, target_observed)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4))
    if "--grid" in sys.argv:
        model.eval()
        raw = triplets_from_grid(random_grid(3, 24, g), torch.randn(3, N_DEMO, generator=g))
        with torch.no_grad():
            risk = torch.sigmoid(model(raw)[0])
        print("risk", [round(r, 3) for r in risk.tolist()])
