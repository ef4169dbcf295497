"""FT-Transformer-style model for tabular rows with missing values, in a Lightning-like module.

Every numeric feature becomes a token (value times a learned vector plus a learned bias); a
[CLS] token is prepended and read out for the prediction. Missing readings (NaN) are set to
zero and their tokens are hidden as keys, so no row attends to a value that was not observed.

Source: self_attention_mask_guide.txt §3 common mistakes and Q3 (seed), TransformerLensOrg/TransformerLens PR #366, conventions.md §3 item 20
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, missing):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).transpose(1, 3).unbind(2)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(missing[:, None, None, :], -1.0)  # expect: MC516 tabular
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class TabularTransformer(nn.Module):
    def __init__(self, num_features, dim=32, heads=4, depth=2, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.weight = nn.Parameter(torch.randn(num_features, dim) * 0.1)
        self.bias = nn.Parameter(torch.zeros(num_features, dim))
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.attn = nn.ModuleList(FeatureAttention(dim, heads) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, values):
        missing = torch.isnan(values)
        tokens = torch.nan_to_num(values)[..., None] * self.weight + self.bias
        x = torch.cat([self.cls.expand(values.size(0), -1, -1), tokens], dim=1)
        missing = F.pad(missing, (1, 0), value=False)
        for attn, norm in zip(self.attn, self.norms):
            x = x + attn(norm(x), missing)
        return self.head(x[:, 0]).squeeze(-1)

    def training_step(self, batch, batch_idx):
        values, target = batch
        return F.binary_cross_entropy_with_logits(self(values), target)

    def validation_step(self, batch, batch_idx):
        values, target = batch
        return ((self(values) > 0).float() == target).float().mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def fit(module, train_batches, val_batches, epochs=3):
    opt = module.configure_optimizers()
    for epoch in range(epochs):
        module.train()
        for i, batch in enumerate(train_batches):
            loss = module.training_step(batch, i)
            opt.zero_grad()
            loss.backward()
            opt.step()
        module.eval()
        with torch.no_grad():
            acc = torch.stack([module.validation_step(b, i) for i, b in enumerate(val_batches)]).mean()
        print(f"epoch {epoch} loss {loss.item():.3f} val acc {acc.item():.2f}")


def synthetic(n, num_features, generator):
    x = torch.randn(n, num_features, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).float()
    x[torch.rand(n, num_features, generator=generator) < 0.2] = float("nan")
    return list(zip(x.split(16), y.split(16)))


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    fit(TabularTransformer(num_features=6), synthetic(128, 6, g), synthetic(64, 6, g))
