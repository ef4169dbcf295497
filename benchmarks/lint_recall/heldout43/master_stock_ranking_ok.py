"""Market-guided stock transformer (MASTER) for cross-sectional return prediction.

Follows SJTU-DMTai/MASTER (AAAI 2024): a market-status gate rescaling the stock features, intra-stock
attention over the look-back window, inter-stock attention among the stocks traded that day,
temporal attention pooling, and daily cross-sectionally z-scored labels; evaluated by IC, RankIC
and ICIR. Several trading days are batched, the universe of each day padded to the widest one, and
the inter-stock attention has an eager path (kept for the attention-map analysis) and an SDPA path.

Source: conventions.md §2.9 and §1 (HF 4-D masks row), transformers models/llama/modeling_llama.py:eager_attention_forward (quoted in conventions.md §2.9)
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MASTERConfig:
    d_feat: int = 6
    d_market: int = 4
    d_model: int = 64
    t_nhead: int = 4
    s_nhead: int = 2
    dropout: float = 0.1
    beta: float = 5.0
    attn_implementation: str = "eager"


def simulate_market(n_days, universe=64, lookback=8, n_sectors=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    sector = torch.randint(n_sectors, (universe,), generator=g)
    beta = 0.5 + torch.rand(universe, generator=g)
    market = 0.01 * torch.randn(n_days + lookback + 1, generator=g)
    sector_ret = 0.01 * torch.randn(n_days + lookback + 1, n_sectors, generator=g)
    rets = beta[None] * market[:, None] + sector_ret[:, sector] + 0.02 * torch.randn(
        n_days + lookback + 1, universe, generator=g)
    days = []
    for d in range(lookback, n_days + lookback):
        n = int(torch.randint(28, universe + 1, (1,), generator=g))
        traded = torch.randperm(universe, generator=g)[:n]
        hist, sec = rets[d - lookback:d, traded].T, sector[traded]
        counts = torch.bincount(sec, minlength=n_sectors).clamp(min=1)
        sec_mean = torch.zeros(n_sectors).index_add_(0, sec, hist[:, -1]) / counts
        label = -(hist[:, -1] - sec_mean[sec]) + beta[traded] * market[d - 1] + 0.005 * torch.randn(n, generator=g)
        feats = torch.stack([hist, hist.cumsum(-1), hist.abs().cumsum(-1) / torch.arange(1, lookback + 1),
                             beta[traded, None].expand_as(hist), (sec[:, None].float() / n_sectors).expand_as(hist),
                             market[d - lookback:d].expand_as(hist)], -1)
        mkt = torch.stack([market[d - lookback:d].mean(), market[d - lookback:d].std(), market[d - 1],
                           rets[d - 1].mean()])
        days.append({"x": feats * 10, "market": mkt * 10, "label": (label - label.mean()) / label.std()})
    return days


def collate_days(days):
    n_max = max(d["x"].size(0) for d in days)
    x = torch.zeros(len(days), n_max, *days[0]["x"].shape[1:])
    label = torch.zeros(len(days), n_max)
    stock_keep = torch.zeros(len(days), n_max, dtype=torch.bool)
    for i, d in enumerate(days):
        n = d["x"].size(0)
        x[i, :n], label[i, :n], stock_keep[i, :n] = d["x"], d["label"], True
    return {"x": x, "market": torch.stack([d["market"] for d in days]), "label": label, "stock_keep": stock_keep}


def _prepare_stock_mask(stock_keep, lookback):
    return stock_keep.repeat_interleave(lookback, dim=0)[:, None, None, :]


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=100):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(-2)]


class Gate(nn.Module):
    def __init__(self, d_input, d_output, beta):
        super().__init__()
        self.trans, self.d_output, self.t = nn.Linear(d_input, d_output), d_output, beta

    def forward(self, gate_input):
        return self.d_output * torch.softmax(self.trans(gate_input) / self.t, dim=-1)


class IntraStockAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = nn.MultiheadAttention(config.d_model, config.t_nhead, config.dropout, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.ffn = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.ReLU(), nn.Dropout(config.dropout),
                                 nn.Linear(config.d_model, config.d_model))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ffn(self.norm2(x))


class InterStockAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads, self.head_dim = config.s_nhead, config.d_model // config.s_nhead
        self.scaling, self.dropout = self.head_dim ** -0.5, config.dropout
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(config.d_model, config.d_model, bias=False)
                                                 for _ in range(3))
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.ffn = nn.Sequential(nn.Linear(config.d_model, config.d_model), nn.ReLU(), nn.Dropout(config.dropout),
                                 nn.Linear(config.d_model, config.d_model))
        self.attn_implementation = config.attn_implementation
        self.last_attn_weights = None

    def forward(self, x, attn_mask):
        B, N, T, D = x.shape
        h = self.norm1(x).transpose(1, 2).reshape(B * T, N, D)
        q, k, v = (p(h).view(B * T, N, self.n_heads, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.attn_implementation == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                                 dropout_p=self.dropout if self.training else 0.0)
        else:
            attn_weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling
            attn_weights = attn_weights.masked_fill(~attn_mask, torch.finfo(attn_weights.dtype).min)
            attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
            self.last_attn_weights = attn_weights.detach()
            out = torch.matmul(F.dropout(attn_weights, self.dropout, self.training), v)
        out = out.transpose(1, 2).reshape(B, T, N, D).transpose(1, 2)
        x = x + out
        return x + self.ffn(self.norm2(x))


class TemporalAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.trans = nn.Linear(d_model, d_model, bias=False)

    def forward(self, z):
        h = self.trans(z)
        lam = torch.softmax(torch.matmul(h, h[..., -1:, :].transpose(-1, -2)).squeeze(-1), dim=-1)
        return torch.matmul(lam.unsqueeze(-2), z).squeeze(-2)


class MASTER(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.feature_gate = Gate(config.d_market, config.d_feat, config.beta)
        self.x2y = nn.Linear(config.d_feat, config.d_model)
        self.pe = PositionalEncoding(config.d_model)
        self.intra = IntraStockAttention(config)
        self.inter = InterStockAttention(config)
        self.temporal = TemporalAttention(config.d_model)
        self.decoder = nn.Linear(config.d_model, 1)

    def forward(self, x, market, stock_keep):
        B, N, T, _ = x.shape
        src = x * self.feature_gate(market)[:, None, None, :]
        h = self.pe(self.x2y(src))
        h = self.intra(h.view(B * N, T, -1)).view(B, N, T, -1)
        h = self.inter(h, _prepare_stock_mask(stock_keep, T))
        return self.decoder(self.temporal(h)).squeeze(-1)


def daily_ic(pred, label, keep):
    ic, ric = [], []
    for p, y, k in zip(pred, label, keep):
        p, y = p[k], y[k]
        ic.append(torch.corrcoef(torch.stack([p, y]))[0, 1].item())
        rp, ry = p.argsort().argsort().float(), y.argsort().argsort().float()
        ric.append(torch.corrcoef(torch.stack([rp, ry]))[0, 1].item())
    ic, ric = torch.tensor(ic), torch.tensor(ric)
    return ic.mean().item(), ric.mean().item(), (ic.mean() / ic.std()).item()


def main():
    torch.manual_seed(0)
    days = simulate_market(700)
    train, test = days[:600], days[600:]
    model = MASTER(MASTERConfig())
    optimizer = torch.optim.Adam(model.parameters(), lr=8e-4)
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(train)).tolist()
        for start in range(0, len(train), 8):
            batch = collate_days([train[i] for i in perm[start:start + 8]])
            pred = model(batch["x"], batch["market"], batch["stock_keep"])
            loss = F.mse_loss(pred[batch["stock_keep"]], batch["label"][batch["stock_keep"]])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_value_(model.parameters(), 3.0)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            batch = collate_days(test)
            pred = model(batch["x"], batch["market"], batch["stock_keep"])
        ic, ric, icir = daily_ic(pred, batch["label"], batch["stock_keep"])
        print(f"epoch {epoch} loss {loss.item():.3f} IC {ic:.3f} RankIC {ric:.3f} ICIR {icir:.2f}")
    with torch.no_grad():
        i = min(range(len(test)), key=lambda j: test[j]["x"].size(0))
        n = test[i]["x"].size(0)
        alone = model(test[i]["x"][None], test[i]["market"][None], torch.ones(1, n, dtype=torch.bool))
        print("smallest day alone vs padded:", (alone[0] - pred[i, :n]).abs().max().item())


if __name__ == "__main__":
    main()
