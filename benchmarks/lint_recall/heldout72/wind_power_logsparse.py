"""LogSparse Transformer (Li et al., 2019) for hourly wind-farm power forecasting.

Convolutional self-attention (causal convolutions produce queries and keys),
optional LogSparse attention where each hour attends to itself and to hours
at exponentially growing distances, a Gaussian likelihood head as in DeepAR,
and the numerical-weather-prediction wind speed for the next hour as a known
covariate. Hours when the grid operator curtailed the farm are not used as
targets.

Source: pytorch/pytorch#29546 (conventions.md section 3 item 9); seed
self_attention_mask_guide.txt section 3 (generate_causal_mask).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_bias(win_len):
    return torch.tril(torch.full((win_len, win_len), float("-inf")), diagonal=-1)  # expect: MC521 lower


def log_sparse_allowed(win_len, sub_len):
    allowed = torch.zeros(win_len, win_len, dtype=torch.bool)
    log_l = math.ceil(math.log2(sub_len))
    for i in range(win_len):
        if (win_len // sub_len) * 2 * log_l > i:
            allowed[i, : i + 1] = True
            continue
        allowed[i, max(i - sub_len + 1, 0) : i + 1] = True
        index = i - sub_len + 1
        step = 1
        while index >= 0:
            allowed[i, index] = True
            index -= step
            step *= 2
    return allowed


class ConvAttention(nn.Module):
    def __init__(self, n_head, n_embd, win_len, q_len, sub_len, sparse=False, attn_pdrop=0.1, resid_pdrop=0.1):
        super().__init__()
        if sparse:
            bias = torch.zeros(win_len, win_len).masked_fill(~log_sparse_allowed(win_len, sub_len), float("-inf"))
        else:
            bias = causal_bias(win_len)
        self.register_buffer("attn_bias", bias.view(1, 1, win_len, win_len))
        self.n_head = n_head
        self.split_size = n_embd * n_head
        self.q_len = q_len
        self.query_key = nn.Conv1d(n_embd, n_embd * n_head * 2, q_len)
        self.value = nn.Linear(n_embd, n_embd * n_head)
        self.c_proj = nn.Linear(n_embd * n_head, n_embd)
        self.attn_dropout = nn.Dropout(attn_pdrop)
        self.resid_dropout = nn.Dropout(resid_pdrop)

    def split_heads(self, x, k=False):
        x = x.view(*x.shape[:-1], self.n_head, x.size(-1) // self.n_head)
        return x.permute(0, 2, 3, 1) if k else x.permute(0, 2, 1, 3)

    def attn(self, query, key, value):
        pre_att = torch.matmul(query, key) / math.sqrt(value.size(-1))
        bias = self.attn_bias[:, :, : pre_att.size(-2), : pre_att.size(-1)]
        pre_att = torch.softmax(pre_att + bias, dim=-1)
        return torch.matmul(self.attn_dropout(pre_att), value), pre_att

    def forward(self, x):
        value = self.split_heads(self.value(x))
        qk_x = F.pad(x.permute(0, 2, 1), pad=(self.q_len - 1, 0))
        query, key = self.query_key(qk_x).permute(0, 2, 1).split(self.split_size, dim=2)
        out, weights = self.attn(self.split_heads(query), self.split_heads(key, k=True), value)
        out = out.permute(0, 2, 1, 3).flatten(2)
        return self.resid_dropout(self.c_proj(out)), weights


class Block(nn.Module):
    def __init__(self, n_head, n_embd, win_len, q_len, sub_len, sparse):
        super().__init__()
        self.attn = ConvAttention(n_head, n_embd, win_len, q_len, sub_len, sparse)
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.1))

    def forward(self, x):
        a, _ = self.attn(x)
        hidden = self.ln_1(x + a)
        return self.ln_2(hidden + self.mlp(hidden))


class DecoderTransformer(nn.Module):
    def __init__(self, n_time_series, n_head=4, num_layer=2, n_embd=16, win_len=96, q_len=3, sub_len=8, sparse=False):
        super().__init__()
        self.po_embed = nn.Embedding(win_len, n_embd)
        self.input_proj = nn.Linear(n_time_series, n_embd)
        self.blocks = nn.ModuleList([Block(n_head, n_embd, win_len, q_len, sub_len, sparse) for _ in range(num_layer)])
        self.mu = nn.Linear(n_embd, 1)
        self.sigma = nn.Linear(n_embd, 1)

    def forward(self, series):
        positions = torch.arange(series.shape[1], device=series.device)
        h = self.input_proj(series) + self.po_embed(positions)
        for block in self.blocks:
            h = block(h)
        return self.mu(h).squeeze(-1), F.softplus(self.sigma(h)).squeeze(-1) + 1e-3


def gaussian_loss(mu, sigma, target, available):
    nll = 0.5 * ((target - mu) / sigma) ** 2 + torch.log(sigma) + 0.5 * math.log(2 * math.pi)
    return (nll * available).sum() / available.sum()


def farm_hours(n_windows, win_len):
    hours = torch.arange(win_len + 1, dtype=torch.float32)
    wind = 7 + 3 * torch.sin(hours / 24 * 2 * math.pi + torch.rand(n_windows, 1) * 6) + torch.randn(n_windows, win_len + 1)
    wind = wind.clamp(min=0)
    power = torch.clamp((wind - 3) / 9, 0, 1) ** 3 + 0.02 * torch.randn(n_windows, win_len + 1)
    curtailed = torch.rand(n_windows, win_len + 1) < 0.05
    nwp_next = wind[:, 1:] + 0.5 * torch.randn(n_windows, win_len)
    hour_of_day = torch.sin(hours[:-1] / 24 * 2 * math.pi).expand(n_windows, -1)
    inputs = torch.stack([power[:, :-1], nwp_next / 10, hour_of_day], dim=-1)
    return inputs, power[:, 1:], (~curtailed[:, 1:]).float()


if __name__ == "__main__":
    torch.manual_seed(0)
    win_len = 64
    inputs, target, available = farm_hours(6, win_len)
    results = {}
    for sparse in (False, True):
        model = DecoderTransformer(n_time_series=3, win_len=win_len, sparse=sparse)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(5):
            mu, sigma = model(inputs)
            loss = gaussian_loss(mu, sigma, target, available)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results["logsparse" if sparse else "dense"] = round(loss.item(), 4)
    model.eval()
    with torch.no_grad():
        mu, sigma = model(inputs)
    print("nll", results, "next-hour forecast", tuple(mu.shape))
