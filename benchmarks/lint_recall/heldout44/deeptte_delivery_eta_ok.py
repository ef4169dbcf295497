"""Food-delivery travel-time estimation (courier ETA from the restaurant to the customer) in the
layout of UrbComp/DeepTTE (Wang et al., AAAI 2018), with self-attention in place of its LSTM.

DeepTTE's ``attr`` / ``traj`` dicts from ``collate_fn`` (``driverID``, ``weekID``, ``timeID``,
``dist``; ``lngs``, ``lats``, ``dist_gap``, ``time_gap``, ``lens``), ``Attr`` embeddings,
``GeoConv`` over consecutive GPS points, a spatio-temporal encoder, the ``EntireEstimator`` with
attention pooling over the route and the ``LocalEstimator`` for segment times, trained with the
weighted multi-task loss ``alpha``. Synthetic couriers in a city with a congested centre.

Source: seed masked_fill_inplace.txt (区别); seed self_attention_mask_guide.txt (section 2).
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def simulate_order(rng, max_len=40):
    n = rng.randint(8, max_len)
    x, y = rng.uniform(0, 1), rng.uniform(0, 1)
    heading = rng.uniform(0, 2 * math.pi)
    driver, week, hour = rng.randrange(24), rng.randrange(7), rng.randrange(24)
    speed = rng.uniform(0.8, 1.2) * (0.6 if hour in (12, 13, 18, 19) else 1.0)
    lngs, lats, dist_gap, time_gap, total = [x], [y], [0.0], [0.0], 0.0
    for _ in range(n - 1):
        heading += rng.gauss(0, 0.4)
        step = rng.uniform(0.005, 0.02)
        x, y = x + step * math.cos(heading), y + step * math.sin(heading)
        centre = math.exp(-((x - 0.5) ** 2 + (y - 0.5) ** 2) / 0.05)
        dt = step * 1000 / (speed * (1.0 - 0.6 * centre)) + rng.expovariate(1 / 3)
        lngs.append(x), lats.append(y), dist_gap.append(step), time_gap.append(dt)
        total += dt
    attr = {"driverID": driver, "weekID": week, "timeID": hour, "dist": sum(dist_gap), "time": total}
    return attr, {"lngs": lngs, "lats": lats, "dist_gap": dist_gap, "time_gap": time_gap}


def collate_fn(data):
    attr = {k: torch.tensor([a[k] for a, _ in data]) for k in data[0][0]}
    lens = torch.tensor([len(t["lngs"]) for _, t in data])
    traj = {"lens": lens}
    for key in ("lngs", "lats", "dist_gap", "time_gap"):
        seqs = torch.zeros(len(data), int(lens.max()))
        for i, (_, t) in enumerate(data):
            seqs[i, : lens[i]] = torch.tensor(t[key])
        traj[key] = seqs
    return attr, traj


class Attr(nn.Module):
    embed_dims = [("driverID", 24, 8), ("weekID", 7, 3), ("timeID", 24, 8)]

    def __init__(self):
        super().__init__()
        for name, dim_in, dim_out in self.embed_dims:
            self.add_module(name + "_em", nn.Embedding(dim_in, dim_out))

    def out_size(self):
        return sum(d for _, _, d in self.embed_dims) + 1

    def forward(self, attr):
        em_list = [getattr(self, name + "_em")(attr[name].long()) for name, _, _ in self.embed_dims]
        em_list.append(attr["dist"].float().unsqueeze(-1))
        return torch.cat(em_list, dim=1)


class GeoConv(nn.Module):
    def __init__(self, kernel_size=3, num_filter=32):
        super().__init__()
        self.kernel_size = kernel_size
        self.state_em = nn.Linear(2, 16)
        self.conv = nn.Conv1d(16, num_filter, kernel_size)

    def forward(self, traj):
        locs = torch.stack([traj["lngs"], traj["lats"]], -1)
        locs = torch.tanh(self.state_em(locs)).permute(0, 2, 1)
        conv_locs = F.elu(self.conv(locs)).permute(0, 2, 1)
        local_dist = traj["dist_gap"].unfold(1, self.kernel_size, 1)[..., 1:].sum(-1, keepdim=True)
        return torch.cat([conv_locs, local_dist * 10], -1)


class SegmentSelfAttention(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, pad):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        return self.norm(x + self.out(ctx))


class SpatioTemporal(nn.Module):
    def __init__(self, attr_size, kernel_size=3, num_filter=32, hidden=64, layers=2):
        super().__init__()
        self.kernel_size = kernel_size
        self.geo_conv = GeoConv(kernel_size, num_filter)
        self.input_proj = nn.Linear(num_filter + 1 + attr_size, hidden)
        self.position = nn.Embedding(64, hidden)
        self.layers = nn.ModuleList([SegmentSelfAttention(hidden) for _ in range(layers)])

    def forward(self, traj, attr_t):
        conv_locs = self.geo_conv(traj)
        n = conv_locs.size(1)
        lens = traj["lens"] - self.kernel_size + 1
        seg_keep = torch.arange(n)[None, :] < lens[:, None]
        h = self.input_proj(torch.cat([conv_locs, attr_t.unsqueeze(1).expand(-1, n, -1)], -1)) + self.position.weight[:n]
        for layer in self.layers:
            h = layer(h, pad=~seg_keep)
        return h, seg_keep


class EntireEstimator(nn.Module):
    def __init__(self, hidden, attr_size):
        super().__init__()
        self.att = nn.Linear(hidden + attr_size, 1)
        self.mlp = nn.Sequential(nn.Linear(hidden + attr_size, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, h, seg_keep, attr_t):
        z = torch.cat([h, attr_t.unsqueeze(1).expand(-1, h.size(1), -1)], -1)
        alpha = self.att(torch.tanh(z)).squeeze(-1)
        alpha = alpha.masked_fill(~seg_keep, float("-inf")).softmax(-1)
        pooled = (alpha.unsqueeze(-1) * h).sum(1)
        return self.mlp(torch.cat([pooled, attr_t], -1)).squeeze(-1)


class DeepTTE(nn.Module):
    def __init__(self, kernel_size=3, alpha=0.3):
        super().__init__()
        self.alpha, self.kernel_size = alpha, kernel_size
        self.attr_net = Attr()
        self.spatio_temporal = SpatioTemporal(self.attr_net.out_size(), kernel_size)
        self.entire_estimate = EntireEstimator(64, self.attr_net.out_size())
        self.local_estimate = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, attr, traj):
        attr_t = self.attr_net(attr)
        h, seg_keep = self.spatio_temporal(traj, attr_t)
        return self.entire_estimate(h, seg_keep, attr_t), self.local_estimate(h).squeeze(-1), seg_keep

    def eval_on_batch(self, attr, traj, time_scale=600.0):
        entire, local, seg_keep = self(attr, traj)
        entire_loss = F.smooth_l1_loss(entire, attr["time"].float() / time_scale)
        local_target = traj["time_gap"].unfold(1, self.kernel_size, 1)[..., 1:].sum(-1) / 60.0
        local_loss = F.smooth_l1_loss(local[seg_keep], local_target[seg_keep])
        return (1 - self.alpha) * entire_loss + self.alpha * local_loss, entire * time_scale


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    train = [simulate_order(rng) for _ in range(2400)]
    test = [simulate_order(rng) for _ in range(500)]
    model = DeepTTE()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(5):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for s in range(0, len(train), 64):
            loss, _ = model.eval_on_batch(*collate_fn(train[s : s + 64]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        model.eval()
        with torch.no_grad():
            attr, traj = collate_fn(test)
            _, pred = model.eval_on_batch(attr, traj)
        true = attr["time"].float()
        mape = ((pred - true).abs() / true).mean().item()
        mae = (pred - true).abs().mean().item()
        print(f"epoch {epoch} train loss {total / math.ceil(len(train) / 64):.4f} test MAPE {100 * mape:.2f}% MAE {mae:.1f}s")


if __name__ == "__main__":
    main()
