"""Lithofacies classification from wireline logs (FORCE 2020 machine-learning contest style).

Each well is resampled to 0.15 m and cut into windows of consecutive depth
samples; a transformer with local attention along depth reads gamma ray,
bulk density, neutron porosity, sonic, deep resistivity, caliper and PEF
and predicts the lithology of every sample. Missing log readings are filled
with the log's median and flagged.

Source: seed self_attention_mask_guide.txt (section 6, create_local_mask; section 7 Q3)
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LOGS = ("GR", "RHOB", "NPHI", "DTC", "RDEP", "CALI", "PE")
LITHOLOGY = ("shale", "sandstone", "sandstone/shale", "limestone", "marl", "chalk")
MEANS = torch.tensor([
    [95.0, 2.45, 0.32, 110.0, 1.5, 8.6, 3.2],
    [40.0, 2.25, 0.22, 85.0, 8.0, 8.5, 2.0],
    [65.0, 2.35, 0.27, 97.0, 3.5, 8.6, 2.6],
    [25.0, 2.60, 0.10, 60.0, 20.0, 8.5, 4.8],
    [70.0, 2.50, 0.25, 95.0, 2.5, 8.7, 3.8],
    [15.0, 2.40, 0.20, 75.0, 6.0, 8.5, 4.5],
])
SCALE = torch.tensor([25.0, 0.12, 0.08, 20.0, 6.0, 0.3, 1.0])
WINDOW = 64


def simulate_well(n_samples, g):
    facies = torch.empty(n_samples, dtype=torch.long)
    i = 0
    while i < n_samples:
        thickness = int(torch.randint(5, 40, (1,), generator=g))
        facies[i : i + thickness] = int(torch.randint(len(LITHOLOGY), (1,), generator=g))
        i += thickness
    logs = MEANS[facies] + 1.3 * SCALE * torch.randn(n_samples, len(LOGS), generator=g)
    logs = F.avg_pool1d(logs.T[None], 5, stride=1, padding=2, count_include_pad=False)[0].T
    logs[torch.rand(n_samples, len(LOGS), generator=g) < 0.08] = float("nan")
    return logs, facies


def to_windows(wells):
    feats, labels = [], []
    for logs, facies in wells:
        missing = logs.isnan()
        filled = torch.where(missing, logs.nanmedian(dim=0).values, logs)
        x = torch.cat([(filled - MEANS.mean(0)) / SCALE, missing.float()], dim=-1)
        for s in range(0, len(facies) - WINDOW + 1, WINDOW // 2):
            feats.append(x[s : s + WINDOW])
            labels.append(facies[s : s + WINDOW])
    return torch.stack(feats), torch.stack(labels)


def local_window_bias(n, radius):
    idx = torch.arange(n)
    far = (idx[:, None] - idx[None, :]).abs() > radius
    return torch.zeros(n, n).masked_fill(far, float("-inf"))


class LocalDepthAttention(nn.Module):
    def __init__(self, dim, heads, radius, max_len=WINDOW):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("window_bias", local_window_bias(max_len, radius), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        scores = scores * self.window_bias[:t, :t]  # expect: MC523 buffer
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class FaciesTransformer(nn.Module):
    def __init__(self, dim=64, heads=4, layers=3, radius=8):
        super().__init__()
        self.inp = nn.Linear(2 * len(LOGS), dim)
        self.pos = nn.Parameter(torch.zeros(1, WINDOW, dim))
        self.attn = nn.ModuleList(LocalDepthAttention(dim, heads, radius) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, len(LITHOLOGY))

    def forward(self, x):
        h = self.inp(x) + self.pos[:, : x.shape[1]]
        for attn, mlp, norm in zip(self.attn, self.mlp, self.norm):
            h = h + attn(norm(h))
            h = h + mlp(h)
        return self.head(h)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    acc = (logits.argmax(-1) == y).float().mean().item()
    return acc, torch.isnan(logits).any().item()


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    train_x, train_y = to_windows([simulate_well(1200, g) for _ in range(12)])
    test_x, test_y = to_windows([simulate_well(1200, g) for _ in range(3)])
    model = FaciesTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        perm = torch.randperm(len(train_x))
        for i in range(0, len(perm), 32):
            idx = perm[i : i + 32]
            loss = F.cross_entropy(model(train_x[idx]).flatten(0, 1), train_y[idx].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        acc, has_nan = evaluate(model, test_x, test_y)
        print(f"epoch {epoch} loss {loss.item():.3f} sample accuracy {acc:.3f} nan outputs {has_nan}")


if __name__ == "__main__":
    main()
