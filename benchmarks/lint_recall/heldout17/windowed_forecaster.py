"""Local-attention forecaster for univariate series: small functional helpers and a training loop.

Source: the seed guide's `create_block_mask` (`mask = torch.zeros(sz, sz)`, the visible
blocks written 0, then `mask[mask == 0] = float('-inf')`), here in the shape of the guide's
`create_local_mask` (a causal sliding window): the window is written 0 into a tensor of zeros,
so the fill hides every key of every query.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def make_windows(series: torch.Tensor, context: int, horizon: int):
    """Slide over a 1-D series: (N, context) inputs and (N, horizon) targets."""
    span = series.unfold(0, context + horizon, 1)
    return span[:, :context], span[:, context:]


def instance_norm(x: torch.Tensor, eps: float = 1e-5):
    """RevIN-style normalisation per window; returns the stats to undo it."""
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True) + eps
    return (x - mean) / std, (mean, std)


def sliding_window_bias(n: int, window: int, device=None) -> torch.Tensor:
    """Additive (n, n) bias: query i may attend to keys max(0, i - window + 1) .. i."""
    bias = torch.zeros(n, n, device=device)
    for i in range(n):
        bias[i, max(0, i - window + 1) : i + 1] = 0
    bias[bias == 0] = -math.inf  # expect: MC504 helper
    return bias


class LocalAttentionForecaster(nn.Module):
    def __init__(self, context=48, horizon=12, patch=4, dim=64, heads=4, window=4):
        super().__init__()
        self.patch, self.heads = patch, heads
        n = context // patch
        self.embed = nn.Linear(patch, dim)
        self.pos = nn.Parameter(torch.randn(n, dim) * 0.02)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(n * dim, horizon)
        self.register_buffer("bias", sliding_window_bias(n, window), persistent=False)

    def attend(self, h):
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
        return self.out(o.transpose(1, 2).reshape(b, n, d))

    def forward(self, x):
        x, (mean, std) = instance_norm(x)
        h = self.embed(x.unflatten(-1, (-1, self.patch))) + self.pos
        h = h + self.attend(self.norm(h))
        h = h + self.ff(self.norm(h))
        y = self.head(h.flatten(1))
        return y * std + mean


def train(model, series, epochs=3, batch_size=64, lr=1e-3):
    xs, ys = make_windows(series, context=48, horizon=12)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(epochs):
        perm = torch.randperm(len(xs))
        for i in range(0, len(xs), batch_size):
            idx = perm[i : i + batch_size]
            loss = F.mse_loss(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: mse {loss.item():.4f}")
    return model


if __name__ == "__main__":
    torch.manual_seed(0)
    t = torch.arange(2000, dtype=torch.float32)
    series = torch.sin(t / 7) + 0.5 * torch.sin(t / 23) + 0.05 * torch.randn_like(t)
    model = train(LocalAttentionForecaster(), series)
    print("finite bias cells:", torch.isfinite(model.bias).sum().item(), "of", model.bias.numel())
    with torch.no_grad():
        h = model.embed(torch.randn(2, 12, 4)) + model.pos
        print("max |attention output - out.bias|:", (model.attend(h) - model.out.bias).abs().max().item())
