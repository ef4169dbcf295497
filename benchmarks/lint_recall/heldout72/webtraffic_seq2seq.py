"""Sequence-to-sequence Transformer for Wikipedia page-view forecasting.

Kaggle web-traffic layout: log1p daily views per page, pages created inside
the training window are NaN before their first day (start padding), day of
week and the page's access/agent type as covariates, teacher forcing in
training and step-by-step decoding with a key/value cache at inference.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7 and
section 5 item 8; pytorch/pytorch PR #111007.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ACCESS_TYPES = ["all-access_all-agents", "desktop_all-agents", "mobile-web_all-agents", "all-access_spider"]


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def split(self, x):
        b, n, d = x.shape
        return x.view(b, n, self.n_heads, d // self.n_heads).transpose(1, 2)

    def forward(self, x, memory=None, keep=None, causal=False, cache=None):
        q = self.split(self.q_proj(x))
        k, v = map(self.split, self.kv_proj(x if memory is None else memory).chunk(2, dim=-1))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        p = self.dropout if self.training else 0.0
        if causal:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # expect: MC510 cache
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p)
        return self.out_proj(out.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    def __init__(self, d_model, n_heads, cross=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads) if cross else None
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, keep=None, memory=None, memory_keep=None, cache=None):
        if self.cross_attn is None:
            x = x + self.self_attn(self.norm1(x), keep=keep)
        else:
            x = x + self.self_attn(self.norm1(x), causal=True, cache=cache)
            x = x + self.cross_attn(self.norm2(x), memory=memory, keep=memory_keep)
        return x + self.ff(self.norm3(x))


def sinusoid(positions, d_model):
    inv = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    ang = positions[..., None].float() * inv
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


class TrafficSeq2Seq(nn.Module):
    def __init__(self, d_model=32, n_heads=4, n_layers=2):
        super().__init__()
        self.d_model = d_model
        self.value_proj = nn.Linear(1 + 7, d_model)
        self.access_embed = nn.Embedding(len(ACCESS_TYPES), d_model)
        self.encoder = nn.ModuleList([Layer(d_model, n_heads) for _ in range(n_layers)])
        self.decoder = nn.ModuleList([Layer(d_model, n_heads, cross=True) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, 1)

    def embed(self, values, dow, access, offset=0):
        x = self.value_proj(torch.cat([values[..., None], F.one_hot(dow, 7).float()], dim=-1))
        pos = torch.arange(values.shape[1], device=values.device) + offset
        return x + sinusoid(pos, self.d_model) + self.access_embed(access)[:, None, :]

    def encode(self, views, created, dow, access):
        x = self.embed(views, dow, access)
        memory_keep = created[:, None, None, :]
        for layer in self.encoder:
            x = layer(x, keep=memory_keep)
        return x, memory_keep

    def decode(self, y_in, dow, access, memory, memory_keep, caches=None, offset=0):
        x = self.embed(y_in, dow, access, offset)
        for i, layer in enumerate(self.decoder):
            cache = None if caches is None else caches[i]
            x = layer(x, memory=memory, memory_keep=memory_keep, cache=cache)
        return self.head(x).squeeze(-1)

    def forward(self, batch):
        memory, memory_keep = self.encode(batch["views"], batch["created"], batch["dow"], batch["access"])
        last = batch["views"][:, -1:]
        y_in = torch.cat([last, batch["target"][:, :-1]], dim=1)
        return self.decode(y_in, batch["target_dow"], batch["access"], memory, memory_keep)

    @torch.no_grad()
    def generate(self, batch, horizon):
        memory, memory_keep = self.encode(batch["views"], batch["created"], batch["dow"], batch["access"])
        caches = [dict() for _ in self.decoder]
        y, preds = batch["views"][:, -1:], []
        for t in range(horizon):
            dow = batch["target_dow"][:, t : t + 1]
            y = self.decode(y, dow, batch["access"], memory, memory_keep, caches=caches, offset=t)
            preds.append(y)
        return torch.cat(preds, dim=1)


def load_pages(n_pages, n_days, horizon, first_day):
    days = torch.arange(n_days + horizon)
    weekly = torch.sin(days * 2 * math.pi / 7)
    raw = torch.rand(n_pages, 1) * 6 + weekly + 0.3 * torch.randn(n_pages, n_days + horizon)
    raw[days[None, :] < torch.tensor(first_day)[:, None]] = float("nan")
    created = ~torch.isnan(raw[:, :n_days])
    mean = torch.nanmean(raw[:, :n_days], dim=1, keepdim=True)
    series = torch.nan_to_num(raw - mean)
    dow = (days % 7).expand(n_pages, -1)
    return {
        "views": series[:, :n_days], "created": created, "dow": dow[:, :n_days],
        "target": series[:, n_days:], "target_dow": dow[:, n_days:],
        "access": torch.randint(0, len(ACCESS_TYPES), (n_pages,)),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    batch = load_pages(n_pages=4, n_days=42, horizon=7, first_day=[0, 10, 30, 0])
    model = TrafficSeq2Seq()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        loss = F.l1_loss(model(batch), batch["target"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    preds = model.generate(batch, horizon=7)
    print("smape-ish l1 %.4f" % loss.item(), "generated", tuple(preds.shape))
