"""Deep Learning for Tabular Data workshop, notebook 2: FT-Transformer from scratch.

Exported from the workshop notebook. We generate an Adult-income-like table (four
numeric and three categorical columns, income above 50K as the target) in which
numeric values are missing at random, as in the census data. Every column becomes
a token (Gorishniy et al., 2021): a per-feature linear map for numbers, an
embedding for categories, plus a ``[CLS]`` token. A missing number gets no token
value, and the attention of every token skips it. We compare against a logistic
regression on mean-imputed features.

Source: seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3; pytorch/pytorch#103963 (conventions.md §3 item 6)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NUMERIC = ["age", "education_num", "hours_per_week", "log_capital_gain"]
CATEGORICAL = {"workclass": 4, "marital_status": 3, "occupation": 6}
MISSING_RATE = 0.2


def make_table(n, generator):
    age = 17 + 60 * torch.rand(n, generator=generator)
    edu = torch.randint(1, 17, (n,), generator=generator).float()
    hours = (40 + 12 * torch.randn(n, generator=generator)).clamp(1, 99)
    gain = torch.where(torch.rand(n, generator=generator) < 0.1, 6 + 4 * torch.rand(n, generator=generator), torch.zeros(n))
    cats = torch.stack([torch.randint(0, k, (n,), generator=generator) for k in CATEGORICAL.values()], dim=1)
    logit = 0.04 * (age - 40) + 0.35 * (edu - 10) + 0.03 * (hours - 40) + 0.5 * gain + 0.9 * (cats[:, 1] == 1) + 0.6 * (cats[:, 2] >= 4) - 1.2
    y = (torch.rand(n, generator=generator) < torch.sigmoid(logit)).float()
    x_num = torch.stack([age, edu, hours, gain], dim=1)
    x_num[torch.rand(x_num.shape, generator=generator) < MISSING_RATE] = float("nan")
    return x_num, cats, y


def standardise(x_num, stats=None):
    if stats is None:
        stats = (torch.nanmean(x_num, 0), torch.sqrt(torch.nanmean((x_num - torch.nanmean(x_num, 0)) ** 2, 0)))
    return (x_num - stats[0]) / stats[1], stats


class FeatureTokenizer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.num_weight = nn.Parameter(torch.randn(len(NUMERIC), d) / math.sqrt(d))
        self.num_bias = nn.Parameter(torch.zeros(len(NUMERIC), d))
        self.cat_emb = nn.ModuleList(nn.Embedding(k, d) for k in CATEGORICAL.values())
        self.cls = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, x_num, x_cat):
        num_tokens = torch.nan_to_num(x_num)[..., None] * self.num_weight + self.num_bias
        cat_tokens = torch.stack([emb(x_cat[:, j]) for j, emb in enumerate(self.cat_emb)], dim=1)
        return torch.cat([self.cls.expand(x_num.size(0), -1, -1), num_tokens, cat_tokens], dim=1)


class FTBlock(nn.Module):
    def __init__(self, d, n_heads, dropout):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d // n_heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Dropout(dropout), nn.Linear(2 * d, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, key_keep):
        B, T, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        scores = scores * key_keep[:, None, None, :]  # expect: MC520 multiply
        attn = self.drop(scores.softmax(dim=-1))
        x = x + self.out((attn @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.ffn(self.norm2(x))


class FTTransformer(nn.Module):
    def __init__(self, d=32, n_heads=4, n_blocks=2, dropout=0.1):
        super().__init__()
        self.tokenizer = FeatureTokenizer(d)
        self.blocks = nn.ModuleList(FTBlock(d, n_heads, dropout) for _ in range(n_blocks))
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, x_num, x_cat):
        observed = ~torch.isnan(x_num)
        always = torch.ones(x_num.size(0), 1 + len(CATEGORICAL), dtype=torch.bool, device=x_num.device)
        key_keep = torch.cat([always[:, :1], observed, always[:, 1:]], dim=1).float()
        x = self.tokenizer(x_num, x_cat)
        for block in self.blocks:
            x = block(x, key_keep)
        return self.head(x[:, 0]).squeeze(-1)


def accuracy(logits, y):
    return ((logits > 0).float() == y).float().mean().item()


def logistic_baseline(train, test, steps=300):
    def features(x_num, x_cat, means):
        filled = torch.where(torch.isnan(x_num), means, x_num)
        onehots = [F.one_hot(x_cat[:, j], k).float() for j, k in enumerate(CATEGORICAL.values())]
        return torch.cat([filled] + onehots, dim=1)
    means = torch.nanmean(train[0], 0)
    xtr, xte = features(train[0], train[1], means), features(test[0], test[1], means)
    lin = nn.Linear(xtr.size(1), 1)
    opt = torch.optim.LBFGS(lin.parameters(), max_iter=steps)

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(lin(xtr).squeeze(-1), train[2])
        loss.backward()
        return loss
    opt.step(closure)
    return accuracy(lin(xte).squeeze(-1).detach(), test[2])


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_num, x_cat, y = make_table(6000, g)
    x_num, stats = standardise(x_num)
    print("missing per column:", dict(zip(NUMERIC, torch.isnan(x_num).float().mean(0).tolist())))
    print("positive rate: %.3f" % y.mean().item())
    train = (x_num[:5000], x_cat[:5000], y[:5000])
    test = (x_num[5000:], x_cat[5000:], y[5000:])
    assert not torch.isnan(torch.nan_to_num(x_num)).any()

    model = FTTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    for epoch in range(8):
        model.train()
        perm = torch.randperm(5000)
        for s in range(0, 5000, 128):
            idx = perm[s : s + 128]
            loss = F.binary_cross_entropy_with_logits(model(train[0][idx], train[1][idx]), train[2][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = accuracy(model(test[0], test[1]), test[2])
        print(f"epoch {epoch}: last batch loss {loss.item():.4f}  test accuracy {acc:.3f}")
    print("logistic regression, mean imputation: test accuracy %.3f" % logistic_baseline(train, test))


if __name__ == "__main__":
    main()
