"""County-level crop yield prediction from satellite grids and weather, after MMST-ViT.

Imitates fudong03/MMST-ViT (Lin et al., "MMST-ViT: Climate Change-aware Crop Yield Prediction
via Multi-Modal Spatial-Temporal Vision Transformer", ICCV 2023): the `MMST_ViT` module with a
per-grid backbone fusing each Sentinel-2 grid image with its short-term (HRRR) weather
(`pvt_backbone(x, context=ys)`, run in chunks of `batch_size` grids in `forward_features`), a
`space_token` and `SpatialTransformer` over the grids of a county for every month, a
`temporal_token` and `TemporalTransformer` over the months with the long-term climate
projected by `proj_context`, the `PreNorm` / `Attention` / `FeedForward` blocks of
lucidrains' vit-pytorch that the repository uses, and `mlp_head`; training with the MSE on
standardised yields and RMSE / R2 / Corr in bushels per acre. Counties here have 3-8 grids,
padded per batch and left out of the spatial attention with `grid_mask`. The data are
synthetic (a greenness band, rainfall and heat stress drive the yield).

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20) and
conventions.md section 5 item 5.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden_dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=16, dropout=0.0):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        h = self.heads
        q, k, v = [t.reshape(b, n, h, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1)]
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if mask is not None:
            mask = mask[:, None, None, :]
            dots = dots.masked_fill(~mask, -1e-9)  # expect: MC516 branch
        attn = dots.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class SpatialTransformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mult=4, dropout=0.0):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.ModuleList([PreNorm(dim, Attention(dim, heads, dim_head, dropout)),
                           PreNorm(dim, FeedForward(dim, dim * mult, dropout))])
            for _ in range(depth)
        ])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, mask=None):
        for attn, ff in self.layers:
            x = attn(x, mask=mask) + x
            x = ff(x) + x
        return self.norm(x)


class TemporalTransformer(SpatialTransformer):
    def forward(self, x, context=None):
        if context is not None:
            x = torch.cat([x[:, :1], x[:, 1:] + context], dim=1)
        return super().forward(x)


class GridBackbone(nn.Module):
    def __init__(self, in_chans, context_dim, dim):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_chans, 16, 3, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(2),
                                  nn.Flatten(), nn.Linear(64, dim))
        self.context_proj = nn.Linear(context_dim, dim)

    def forward(self, x, context):
        return self.stem(x) + self.context_proj(context.mean(dim=1))


class MMST_ViT(nn.Module):
    def __init__(self, out_dim=1, num_grid=8, num_short_term_seq=4, num_long_term_seq=12, num_year=3,
                 pvt_backbone=None, context_dim=4, dim=32, batch_size=64, depth=2, heads=4, dim_head=8,
                 scale_dim=2, dropout=0.0):
        super().__init__()
        self.batch_size = batch_size
        self.pvt_backbone = pvt_backbone
        self.proj_context = nn.Linear(num_year * num_long_term_seq * context_dim, num_short_term_seq * dim)
        self.pos_embedding = nn.Parameter(torch.randn(1, num_short_term_seq, num_grid + 1, dim) * 0.02)
        self.space_token = nn.Parameter(torch.randn(1, 1, dim))
        self.space_transformer = SpatialTransformer(dim, depth, heads, dim_head, scale_dim, dropout)
        self.temporal_token = nn.Parameter(torch.randn(1, 1, dim))
        self.temporal_transformer = TemporalTransformer(dim, depth, heads, dim_head, scale_dim, dropout)
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, out_dim))

    def forward_features(self, x, ys):
        x = x.flatten(0, 2)
        ys = ys.flatten(0, 2)
        outs = []
        for start in range(0, x.shape[0], self.batch_size):
            outs.append(self.pvt_backbone(x[start:start + self.batch_size], context=ys[start:start + self.batch_size]))
        return torch.cat(outs, dim=0)

    def forward(self, x, ys, zs, grid_mask):
        b, t, g = x.shape[:3]
        x = self.forward_features(x, ys).view(b, t, g, -1)
        cls_space_tokens = self.space_token.expand(b, t, 1, -1)
        x = torch.cat((cls_space_tokens, x), dim=2) + self.pos_embedding[:, :, :g + 1]
        space_mask = torch.cat([torch.ones(b, 1, dtype=torch.bool), grid_mask], dim=1)
        space_mask = space_mask[:, None, :].expand(b, t, g + 1).reshape(b * t, g + 1)
        x = self.space_transformer(x.reshape(b * t, g + 1, -1), mask=space_mask)
        x = x[:, 0].view(b, t, -1)
        x = torch.cat((self.temporal_token.expand(b, 1, -1), x), dim=1)
        zs = self.proj_context(zs.flatten(1)).view(b, t, -1)
        x = self.temporal_transformer(x, zs)
        return self.mlp_head(x[:, 0]).squeeze(-1)


def simulate_county(rng, t=4, img=8, days=10):
    g = int(rng.integers(3, 9))
    greenness = rng.uniform(0.2, 1.0)
    rain = rng.uniform(0.0, 1.0)
    heat = rng.uniform(0.0, 1.0)
    x = rng.normal(0, 0.3, (t, g, 3, img, img)).astype(np.float32)
    x[:, :, 1] += greenness * np.linspace(0.5, 1.5, t)[:, None, None, None]
    ys = rng.normal(0, 0.3, (t, g, days, 4)).astype(np.float32)
    ys[..., 0] += rain
    ys[..., 1] += heat
    zs = rng.normal(0, 0.3, (3, 12, 4)).astype(np.float32)
    zs[..., 0] += rain
    yield_bu = 140 + 60 * greenness + 25 * rain - 30 * heat * (1 - rain) + rng.normal(0, 4)
    return x, ys, zs, np.float32(yield_bu)


def collate(counties):
    g_max = max(c[0].shape[1] for c in counties)
    b = len(counties)
    t = counties[0][0].shape[0]
    x = torch.zeros(b, t, g_max, *counties[0][0].shape[2:])
    ys = torch.zeros(b, t, g_max, *counties[0][1].shape[2:])
    grid_mask = torch.zeros(b, g_max, dtype=torch.bool)
    for i, (xi, yi, _, _) in enumerate(counties):
        g = xi.shape[1]
        x[i, :, :g] = torch.from_numpy(xi)
        ys[i, :, :g] = torch.from_numpy(yi)
        grid_mask[i, :g] = True
    zs = torch.from_numpy(np.stack([c[2] for c in counties]))
    y = torch.tensor([c[3] for c in counties])
    return x, ys, zs, grid_mask, y


if __name__ == "__main__":
    torch.manual_seed(5)
    rng = np.random.default_rng(5)
    counties = [simulate_county(rng) for _ in range(256)]
    train, test = counties[:208], counties[208:]
    y_mean = float(np.mean([c[3] for c in train]))
    y_std = float(np.std([c[3] for c in train]))
    model = MMST_ViT(pvt_backbone=GridBackbone(3, 4, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    for epoch in range(6):
        model.train()
        order = rng.permutation(len(train))
        for start in range(0, len(train), 16):
            x, ys, zs, grid_mask, y = collate([train[i] for i in order[start:start + 16]])
            loss = F.mse_loss(model(x, ys, zs, grid_mask), (y - y_mean) / y_std)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            x, ys, zs, grid_mask, y = collate(test)
            pred = model(x, ys, zs, grid_mask) * y_std + y_mean
        rmse = torch.sqrt(F.mse_loss(pred, y)).item()
        r2 = 1 - torch.sum((pred - y) ** 2).item() / torch.sum((y - y.mean()) ** 2).item()
        corr = np.corrcoef(pred.numpy(), y.numpy())[0, 1]
        print(f"epoch {epoch + 1}: train mse {loss.item():.3f}  test RMSE {rmse:.2f} bu/ac  R2 {r2:.3f}  Corr {corr:.3f}")
