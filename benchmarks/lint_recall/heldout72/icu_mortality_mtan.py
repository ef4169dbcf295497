"""mTAN encoder for in-hospital mortality from the first 48 hours of an ICU stay.

PhysioNet 2012 layout: irregularly sampled vital signs and labs, each patient a
different number of charting times (padded at the end), NaN where a variable
was not charted. Multi-time attention re-samples every channel onto learned
reference time points (per-channel softmax over the observation times), then
a GRU and a classifier predict death in hospital.

Source: seed self_attention_mask_guide.txt section 7 Q3; pytorch/pytorch#103963
(conventions.md section 3 item 6).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VARIABLES = ["HR", "MAP", "SpO2", "Temp", "Lactate", "GCS"]


class multiTimeAttention(nn.Module):
    def __init__(self, input_dim, nhidden=16, embed_time=16, num_heads=1):
        super().__init__()
        assert embed_time % num_heads == 0
        self.embed_time = embed_time
        self.embed_time_k = embed_time // num_heads
        self.h = num_heads
        self.dim = input_dim
        self.nhidden = nhidden
        self.linears = nn.ModuleList([nn.Linear(embed_time, embed_time), nn.Linear(embed_time, embed_time),
                                      nn.Linear(input_dim * num_heads, nhidden)])

    def attention(self, query, key, value, mask=None, dropout=None):
        dim = value.size(-1)
        d_k = query.size(-1)
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
        scores = scores.unsqueeze(-1).repeat_interleave(dim, dim=-1)
        if mask is not None:
            p_attn = F.softmax(scores * mask.unsqueeze(-3), dim=-2)  # expect: MC520 product
        else:
            p_attn = F.softmax(scores, dim=-2)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.sum(p_attn * value.unsqueeze(-3), -2), p_attn

    def forward(self, query, key, value, mask=None, dropout=None):
        batch, seq_len, dim = value.size()
        if mask is not None:
            mask = mask.unsqueeze(1)
        value = value.unsqueeze(1)
        query, key = [l(x).view(x.size(0), -1, self.h, self.embed_time_k).transpose(1, 2)
                      for l, x in zip(self.linears, (query, key))]
        x, _ = self.attention(query, key, value, mask, dropout)
        x = x.transpose(1, 2).contiguous().view(batch, -1, self.h * dim)
        return self.linears[-1](x)


class enc_mtan_classif(nn.Module):
    def __init__(self, input_dim, query, nhidden=16, embed_time=16, num_heads=1, freq=10.0):
        super().__init__()
        self.dim = input_dim
        self.freq = freq
        self.register_buffer("query", query)
        self.att = multiTimeAttention(2 * input_dim, nhidden, embed_time, num_heads)
        self.enc = nn.GRU(nhidden, nhidden, batch_first=True)
        self.classifier = nn.Sequential(nn.Linear(nhidden, 64), nn.ReLU(), nn.Linear(64, 2))
        self.periodic = nn.Linear(1, embed_time - 1)
        self.linear = nn.Linear(1, 1)

    def learn_time_embedding(self, tt):
        tt = tt.unsqueeze(-1)
        return torch.cat([self.linear(tt), torch.sin(self.periodic(tt))], -1)

    def forward(self, values, time_steps):
        mask = (~torch.isnan(values)).float()
        values = torch.nan_to_num(values)
        x = torch.cat([values, mask], dim=2)
        mask = torch.cat([mask, mask], dim=2)
        key = self.learn_time_embedding(time_steps)
        query = self.learn_time_embedding(self.query.unsqueeze(0))
        out = self.att(query, key, x, mask)
        _, h = self.enc(out)
        return self.classifier(h.squeeze(0))


def simulate_stay(died):
    n_times = int(torch.randint(20, 60, ()))
    times = torch.sort(torch.rand(n_times) * 48).values
    base = torch.tensor([85.0, 80.0, 97.0, 37.0, 1.5, 14.0])
    drift = torch.tensor([0.3, -0.2, -0.05, 0.01, 0.05, -0.05]) * (1.0 if died else 0.0)
    vals = base + drift * times[:, None] + torch.randn(n_times, len(VARIABLES)) * torch.tensor([5, 5, 1, 0.3, 0.3, 1])
    charted = torch.rand(n_times, len(VARIABLES)) < torch.tensor([0.9, 0.8, 0.9, 0.3, 0.1, 0.25])
    charted[:, 0] |= ~charted.any(dim=1)
    return times / 48.0, torch.where(charted, vals, torch.full_like(vals, float("nan")))


def collate_stays(stays):
    max_len = max(t.shape[0] for t, _ in stays)
    times = torch.zeros(len(stays), max_len)
    values = torch.full((len(stays), max_len, len(VARIABLES)), float("nan"))
    for i, (t, v) in enumerate(stays):
        times[i, : t.shape[0]] = t
        values[i, : v.shape[0]] = v
    return times, values


def standardise(values, mean=None, std=None):
    if mean is None:
        mean = torch.nanmean(values, dim=(0, 1))
        std = torch.sqrt(torch.nanmean((values - mean) ** 2, dim=(0, 1))).clamp(min=1e-3)
    return (values - mean) / std, mean, std


if __name__ == "__main__":
    torch.manual_seed(0)
    labels = torch.tensor([0, 1, 0, 0, 1, 0, 1, 0])
    times, values = collate_stays([simulate_stay(bool(y)) for y in labels])
    values, mean, std = standardise(values)
    model = enc_mtan_classif(len(VARIABLES), torch.linspace(0, 1.0, 24), nhidden=16, embed_time=16, num_heads=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        logits = model(values, times)
        loss = F.cross_entropy(logits, labels, weight=torch.tensor([1.0, 2.0]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        risk = model(values, times).softmax(-1)[:, 1]
    print("loss %.4f" % loss.item(), "mortality risk", [round(r, 3) for r in risk.tolist()])
