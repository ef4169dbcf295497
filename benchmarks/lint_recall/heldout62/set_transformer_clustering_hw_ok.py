"""Probabilistic Machine Learning, Homework 4: amortised clustering with a Set Transformer.

Instead of running EM on every data set, we train a Set Transformer (Lee et al., 2019)
to read a whole set of 2-D points drawn from a mixture of four Gaussians and to output
the four cluster centres at once. Sets have different sizes, so each batch is padded
to ``MAX_POINTS`` and carries a boolean ``keep`` mask (True = real point). The
homework builds MAB, SAB and PMA blocks by hand, checks permutation invariance, trains
with a Chamfer loss and compares the result with a few steps of k-means.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险); conventions.md §2.3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

K = 4
MAX_POINTS = 48
D_MODEL = 64


def sample_sets(batch_size, generator):
    centres = torch.rand(batch_size, K, 2, generator=generator) * 8.0 - 4.0
    n_points = torch.randint(MAX_POINTS // 3, MAX_POINTS + 1, (batch_size,), generator=generator)
    component = torch.randint(0, K, (batch_size, MAX_POINTS), generator=generator)
    noise = 0.3 * torch.randn(batch_size, MAX_POINTS, 2, generator=generator)
    points = centres.gather(1, component[..., None].expand(-1, -1, 2)) + noise
    keep = torch.arange(MAX_POINTS)[None, :] < n_points[:, None]
    points = points.masked_fill(~keep[..., None], 0.0)
    return points, keep, centres


class MAB(nn.Module):
    def __init__(self, dim, n_heads=4):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = dim // n_heads
        self.fc_q = nn.Linear(dim, dim)
        self.fc_k = nn.Linear(dim, dim)
        self.fc_v = nn.Linear(dim, dim)
        self.fc_o = nn.Linear(dim, dim)
        self.ln0 = nn.LayerNorm(dim)
        self.ln1 = nn.LayerNorm(dim)

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x, y, x_keep, y_keep):
        q, k, v = self.split(self.fc_q(x)), self.split(self.fc_k(y)), self.split(self.fc_v(y))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        scores = scores.masked_fill(~y_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        attn = attn.masked_fill(~x_keep[:, None, :, None], 0.0)
        o = q + attn @ v
        o = o.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        o = self.ln0(o)
        return self.ln1(o + F.relu(self.fc_o(o)))


class SAB(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mab = MAB(dim)

    def forward(self, x, keep):
        return self.mab(x, x, keep, keep)


class PMA(nn.Module):
    def __init__(self, dim, n_seeds):
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(1, n_seeds, dim) / math.sqrt(dim))
        self.mab = MAB(dim)

    def forward(self, x, keep):
        seeds = self.seeds.expand(x.shape[0], -1, -1)
        seed_keep = torch.ones(x.shape[0], seeds.shape[1], dtype=torch.bool, device=x.device)
        return self.mab(seeds, x, seed_keep, keep), seed_keep


class SetTransformer(nn.Module):
    def __init__(self, dim=D_MODEL):
        super().__init__()
        self.embed = nn.Linear(2, dim)
        self.enc = nn.ModuleList([SAB(dim), SAB(dim)])
        self.pool = PMA(dim, K)
        self.dec = SAB(dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, points, keep):
        h = self.embed(points)
        for block in self.enc:
            h = block(h, keep)
        z, z_keep = self.pool(h, keep)
        return self.out(self.dec(z, z_keep))


def chamfer(pred, target):
    d = torch.cdist(pred, target)
    return d.min(dim=2).values.mean() + d.min(dim=1).values.mean()


def kmeans_centres(points, keep, steps=10):
    out = []
    for x, m in zip(points, keep):
        x = x[m]
        c = x[torch.randperm(len(x))[:K]]
        for _ in range(steps):
            assign = torch.cdist(x, c).argmin(1)
            c = torch.stack([x[assign == j].mean(0) if (assign == j).any() else c[j] for j in range(K)])
        out.append(c)
    return torch.stack(out)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    points, keep, centres = sample_sets(3, gen)
    print("points", tuple(points.shape), "set sizes", keep.sum(1).tolist())
    assert keep.dtype == torch.bool and keep[:, 0].all()

    model = SetTransformer()
    with torch.no_grad():
        perm = torch.randperm(MAX_POINTS)
        a = model(points, keep)
        b = model(points[:, perm], keep[:, perm])
    print("permutation invariance, max diff:", (a - b).abs().max().item())

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(300):
        points, keep, centres = sample_sets(32, gen)
        loss = chamfer(model(points, keep), centres)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step:3d}  chamfer {loss.item():.3f}")

    test_gen = torch.Generator().manual_seed(123)
    points, keep, centres = sample_sets(64, test_gen)
    model.eval()
    with torch.no_grad():
        pred = model(points, keep)
    print("test chamfer, set transformer: %.3f" % chamfer(pred, centres).item())
    print("test chamfer, 10 steps of k-means: %.3f" % chamfer(kmeans_centres(points, keep), centres).item())


if __name__ == "__main__":
    main()
