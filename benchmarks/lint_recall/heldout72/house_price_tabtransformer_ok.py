"""TabTransformer for house sale prices (Ames / Kaggle House Prices style).

Categorical columns (neighbourhood, zoning, building type, kitchen and
fireplace quality, sale condition) get contextual embeddings from a
Transformer; a category the assessor left empty maps to the special index 0
and is not attended to. Continuous columns are standardised, with missing
values imputed and flagged. The target is log1p(SalePrice). `--bf16` trains
under CPU bfloat16 autocast.

Source: NVIDIA/apex#1052 (conventions.md section 3 item 18); huggingface/lerobot
PR #710 (section 3 item 19); conventions.md section 2.3.
"""
import argparse
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import einsum, nn

CATEGORICAL = {"Neighborhood": 25, "MSZoning": 5, "BldgType": 5, "KitchenQual": 4, "FireplaceQu": 5, "SaleCondition": 6}
CONTINUOUS = ["GrLivArea", "LotFrontage", "YearBuilt", "OverallQual", "TotalBsmtSF"]
NUM_SPECIAL_TOKENS = 1


def exists(val):
    return val is not None


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult * 2), nn.GLU(dim=-1),
                                 nn.Dropout(dropout), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=8, dropout=0.0):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head**-0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        x = self.norm(x)
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = map(lambda t: t.view(b, n, self.heads, -1).transpose(1, 2), (q, k, v))
        sim = einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        if exists(mask):
            sim = sim.masked_fill(~mask[:, None, None, :], torch.finfo(sim.dtype).min)
        attn = self.dropout(sim.softmax(dim=-1))
        out = einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1)), attn


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, attn_dropout=0.1, ff_dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.ModuleList([Attention(dim, heads, dim_head, attn_dropout), FeedForward(dim, dropout=ff_dropout)])
            for _ in range(depth)
        ])

    def forward(self, x, mask=None, return_attn=False):
        post_softmax_attns = []
        for attn, ff in self.layers:
            attn_out, post_softmax_attn = attn(x, mask=mask)
            post_softmax_attns.append(post_softmax_attn)
            x = x + attn_out
            x = ff(x) + x
        return (x, torch.stack(post_softmax_attns)) if return_attn else x


class TabTransformer(nn.Module):
    def __init__(self, *, categories, num_continuous, dim=16, depth=2, heads=4, dim_head=8, mlp_hidden_mults=(4, 2)):
        super().__init__()
        total_tokens = sum(categories) + NUM_SPECIAL_TOKENS * len(categories)
        offsets = F.pad(torch.tensor([c + NUM_SPECIAL_TOKENS for c in categories]), (1, 0), value=0).cumsum(-1)[:-1]
        self.register_buffer("categories_offset", offsets)
        self.category_embed = nn.Embedding(total_tokens, dim)
        self.transformer = Transformer(dim, depth, heads, dim_head)
        self.norm = nn.LayerNorm(2 * num_continuous)
        input_size = dim * len(categories) + 2 * num_continuous
        dims = [input_size] + [input_size * m // 8 for m in mlp_hidden_mults] + [1]
        layers = []
        for dim_in, dim_out in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(dim_in, dim_out), nn.ReLU()]
        self.mlp = nn.Sequential(*layers[:-1])

    def forward(self, x_categ, x_cont, cont_missing, return_attn=False):
        present = x_categ != 0
        x = self.category_embed(x_categ + self.categories_offset)
        x, attns = self.transformer(x, mask=present, return_attn=True)
        flat_categ = x.flatten(1)
        normed_cont = self.norm(torch.cat([x_cont, cont_missing.to(x_cont.dtype)], dim=-1))
        logits = self.mlp(torch.cat([flat_categ, normed_cont], dim=-1)).squeeze(-1)
        return (logits, attns) if return_attn else logits


def load_listings(n):
    x_categ = torch.stack([torch.randint(1, c + 1, (n,)) for c in CATEGORICAL.values()], dim=1)
    x_categ[torch.rand(n, len(CATEGORICAL)) < 0.12] = 0
    raw = torch.stack([1500 + 500 * torch.randn(n), 70 + 20 * torch.randn(n), 1970 + 30 * torch.rand(n),
                       torch.randint(1, 11, (n,)).float(), 1000 + 400 * torch.randn(n)], dim=1)
    raw[:, 1][torch.rand(n) < 0.2] = float("nan")
    cont_missing = torch.isnan(raw)
    mean = torch.nanmean(raw, dim=0)
    std = torch.sqrt(torch.nanmean((raw - mean) ** 2, dim=0))
    x_cont = torch.where(cont_missing, torch.zeros_like(raw), (raw - mean) / std)
    log_price = 12.0 + 0.3 * x_cont[:, 0] + 0.1 * x_cont[:, 3] + 0.02 * x_categ[:, 0].float() + 0.05 * torch.randn(n)
    return x_categ, x_cont, cont_missing, log_price


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    x_categ, x_cont, cont_missing, log_price = load_listings(32)
    model = TabTransformer(categories=tuple(CATEGORICAL.values()), num_continuous=len(CONTINUOUS))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else nullcontext()
    for step in range(5):
        with autocast:
            pred = model(x_categ, x_cont, cont_missing)
            loss = F.mse_loss(pred.float(), log_price - 12.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred, attns = model(x_categ, x_cont, cont_missing, return_attn=True)
    rmsle = torch.sqrt(F.mse_loss(pred + 12.0, log_price))
    print("loss %.4f" % loss.item(), "rmsle %.4f" % rmsle.item(), "attn", tuple(attns.shape))
