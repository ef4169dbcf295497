"""Point Cloud Transformer (PCT) classifier for scans with different numbers of points.

Written after MenghaoGuo/PCT and Strawberry-Eat-Mango/PCT_Pytorch (model.py: the SPCT
variant, with the point embedding of two 1x1 Conv1d + BatchNorm1d layers,
Point_Transformer_Last stacking four SA_Layer offset-attention blocks whose q and k convs
share weights, softmax over the last axis and the L1 re-normalisation over the other,
``conv_fuse``, max pooling and the three-layer head; util.py ``cal_loss`` with label
smoothing). Scans of different sizes are zero-padded by the collate function and carry a
point mask.

Source: seed masked_fill_inplace.txt (区别, 非原地操作), conventions.md §1 (direction cheat-sheet).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = ["sphere", "cube", "cylinder", "cone", "torus"]


class SA_Layer(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.q_conv = nn.Conv1d(channels, channels // 4, 1, bias=False)
        self.k_conv = nn.Conv1d(channels, channels // 4, 1, bias=False)
        self.q_conv.weight = self.k_conv.weight
        self.v_conv = nn.Conv1d(channels, channels, 1)
        self.trans_conv = nn.Conv1d(channels, channels, 1)
        self.after_norm = nn.BatchNorm1d(channels)
        self.act = nn.ReLU()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, key_mask=None):
        x_q = self.q_conv(x).permute(0, 2, 1)
        x_k = self.k_conv(x)
        x_v = self.v_conv(x)
        energy = torch.bmm(x_q, x_k)
        if key_mask is not None:
            energy = energy.masked_fill(~key_mask[:, None, :], float("-inf"))
        attention = self.softmax(energy)
        if key_mask is not None:
            attention = attention * key_mask[:, :, None]
        attention = attention / (1e-9 + attention.sum(dim=1, keepdim=True))
        x_r = torch.bmm(x_v, attention)
        x_r = self.act(self.after_norm(self.trans_conv(x - x_r)))
        return x + x_r


class Point_Transformer_Last(nn.Module):
    def __init__(self, channels=64):
        super().__init__()
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm1d(channels)
        self.sa1, self.sa2, self.sa3, self.sa4 = (SA_Layer(channels) for _ in range(4))

    def forward(self, x, mask=None):
        x = F.relu(self.bn1(self.conv1(x)))
        x1 = self.sa1(x, key_mask=mask)
        x2 = self.sa2(x1, key_mask=mask)
        x3 = self.sa3(x2, key_mask=mask)
        x4 = self.sa4(x3, key_mask=mask)
        return torch.cat((x1, x2, x3, x4), dim=1)


@dataclass
class PCTArgs:
    emb_dims: int = 64
    dropout: float = 0.5
    output_channels: int = len(SHAPES)


class SPct(nn.Module):
    def __init__(self, args: PCTArgs):
        super().__init__()
        self.conv1 = nn.Conv1d(3, args.emb_dims, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(args.emb_dims, args.emb_dims, kernel_size=1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm1d(args.emb_dims), nn.BatchNorm1d(args.emb_dims)
        self.pt_last = Point_Transformer_Last(args.emb_dims)
        self.conv_fuse = nn.Sequential(nn.Conv1d(4 * args.emb_dims, 2 * args.emb_dims, kernel_size=1, bias=False),
                                       nn.BatchNorm1d(2 * args.emb_dims), nn.LeakyReLU(negative_slope=0.2))
        self.linear1 = nn.Linear(2 * args.emb_dims, args.emb_dims, bias=False)
        self.bn6 = nn.BatchNorm1d(args.emb_dims)
        self.dp1 = nn.Dropout(p=args.dropout)
        self.linear2 = nn.Linear(args.emb_dims, args.output_channels)

    def forward(self, points, point_mask=None):
        x = points.permute(0, 2, 1)
        if point_mask is None:
            point_mask = torch.ones(points.shape[:2], dtype=torch.bool, device=points.device)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.conv_fuse(self.pt_last(x, mask=point_mask))
        x = x.masked_fill(~point_mask[:, None, :], float("-inf")).max(dim=-1)[0]
        x = self.dp1(F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2))
        return self.linear2(x)


def cal_loss(pred, gold, smoothing=True, eps=0.2):
    if not smoothing:
        return F.cross_entropy(pred, gold)
    n_class = pred.size(1)
    one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
    one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
    return -(one_hot * F.log_softmax(pred, dim=1)).sum(dim=1).mean()


def sample_shape(label, n, generator):
    u, v = torch.rand(n, generator=generator) * 2 * math.pi, torch.rand(n, generator=generator)
    if label == "sphere":
        p = F.normalize(torch.randn(n, 3, generator=generator), dim=-1)
    elif label == "cube":
        p = torch.rand(n, 3, generator=generator) * 2 - 1
        face = torch.randint(0, 3, (n,), generator=generator)
        p[torch.arange(n), face] = torch.sign(p[torch.arange(n), face])
    elif label == "cylinder":
        p = torch.stack([u.cos(), u.sin(), v * 2 - 1], dim=-1)
    elif label == "cone":
        p = torch.stack([(1 - v) * u.cos(), (1 - v) * u.sin(), v * 2 - 1], dim=-1)
    else:
        w = torch.rand(n, generator=generator) * 2 * math.pi
        p = torch.stack([(1 + 0.4 * w.cos()) * u.cos(), (1 + 0.4 * w.cos()) * u.sin(), 0.4 * w.sin()], dim=-1)
    theta = float(torch.rand((), generator=generator)) * 2 * math.pi
    rot = torch.tensor([[math.cos(theta), -math.sin(theta), 0.0], [math.sin(theta), math.cos(theta), 0.0], [0.0, 0.0, 1.0]])
    return p @ rot.T + 0.01 * torch.randn(n, 3, generator=generator)


def collate_scans(scans):
    n = max(s["points"].shape[0] for s in scans)
    points = torch.zeros(len(scans), n, 3)
    point_mask = torch.zeros(len(scans), n, dtype=torch.bool)
    for i, s in enumerate(scans):
        points[i, : s["points"].shape[0]] = s["points"]
        point_mask[i, : s["points"].shape[0]] = True
    return {"points": points, "point_mask": point_mask, "label": torch.tensor([s["label"] for s in scans])}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    scans = []
    for i in range(200):
        label = i % len(SHAPES)
        scans.append({"points": sample_shape(SHAPES[label], int(torch.randint(48, 160, (1,), generator=g)), g), "label": label})
    model = SPct(PCTArgs())
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=1e-4)
    for epoch in range(3):
        for b in range(0, 160, 16):
            batch = collate_scans(scans[b : b + 16])
            loss = cal_loss(model(batch["points"], point_mask=batch["point_mask"]), batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = collate_scans(scans[160:])
        acc = (model(**{k: batch[k] for k in ("points", "point_mask")}).argmax(-1) == batch["label"]).float().mean()
        print(f"test accuracy {acc.item():.3f}")
        small = min(scans, key=lambda s: s["points"].shape[0])
        large = max(scans, key=lambda s: s["points"].shape[0])
        both, alone = collate_scans([small, large]), collate_scans([small])
        diff = model(both["points"], both["point_mask"])[0] - model(alone["points"], alone["point_mask"])[0]
        print("small scan padded vs alone:", diff.abs().max().item())
