"""Point Cloud Transformer (SPCT) with offset attention over padded scans of different sizes.

Layout of MenghaoGuo/PCT (networks/cls/pct.py: SA_Layer with q_conv / k_conv / v_conv,
trans_conv and the column renormalisation, Point_Transformer_Last, SPct with conv_fuse).
Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, conventions.md §1
(direction cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class PCTArgs:
    emb_dims: int = 256
    channels: int = 64
    dropout: float = 0.5
    output_channels: int = 4
    min_points: int = 48
    max_points: int = 128


def padding_bias(num_points: torch.Tensor, max_points: int) -> torch.Tensor:
    pad = torch.arange(max_points, device=num_points.device)[None, :] >= num_points[:, None]
    return torch.zeros(pad.shape, device=pad.device).masked_fill(pad, float("-inf"))[:, None, :]


class SA_Layer(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.q_conv = nn.Conv1d(channels, channels // 4, 1, bias=False)
        self.k_conv = nn.Conv1d(channels, channels // 4, 1, bias=False)
        self.q_conv.weight = self.k_conv.weight
        self.v_conv = nn.Conv1d(channels, channels, 1)
        self.trans_conv = nn.Conv1d(channels, channels, 1)
        self.after_norm = nn.BatchNorm1d(channels)
        self.act = nn.ReLU()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x_q = self.q_conv(x).permute(0, 2, 1)
        x_k = self.k_conv(x)
        x_v = self.v_conv(x)
        energy = torch.bmm(x_q, x_k) + mask
        attention = self.softmax(energy)
        attention = attention * mask.transpose(1, 2)  # expect: MC523 pct
        attention = attention / (1e-9 + attention.sum(dim=1, keepdim=True))
        x_r = torch.bmm(x_v, attention)
        x_r = self.act(self.after_norm(self.trans_conv(x - x_r)))
        return x + x_r


class Point_Transformer_Last(nn.Module):
    def __init__(self, args: PCTArgs) -> None:
        super().__init__()
        c = args.channels
        self.conv1, self.conv2 = nn.Conv1d(c, c, 1, bias=False), nn.Conv1d(c, c, 1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm1d(c), nn.BatchNorm1d(c)
        self.sa1, self.sa2, self.sa3, self.sa4 = SA_Layer(c), SA_Layer(c), SA_Layer(c), SA_Layer(c)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x1 = self.sa1(x, mask)
        x2 = self.sa2(x1, mask)
        x3 = self.sa3(x2, mask)
        x4 = self.sa4(x3, mask)
        return torch.cat((x1, x2, x3, x4), dim=1)


class SPct(nn.Module):
    def __init__(self, args: PCTArgs) -> None:
        super().__init__()
        c = args.channels
        self.args = args
        self.conv1 = nn.Conv1d(3, c, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(c, c, kernel_size=1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm1d(c), nn.BatchNorm1d(c)
        self.pt_last = Point_Transformer_Last(args)
        self.conv_fuse = nn.Sequential(
            nn.Conv1d(4 * c, args.emb_dims, kernel_size=1, bias=False),
            nn.BatchNorm1d(args.emb_dims),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.linear1 = nn.Linear(args.emb_dims, 128, bias=False)
        self.bn6 = nn.LayerNorm(128)
        self.dp1 = nn.Dropout(p=args.dropout)
        self.linear2 = nn.Linear(128, args.output_channels)

    def forward(self, x: torch.Tensor, num_points: torch.Tensor) -> torch.Tensor:
        mask = padding_bias(num_points, x.size(2))
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.conv_fuse(self.pt_last(x, mask))
        x = (x + mask).max(dim=-1)[0]
        x = self.dp1(F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2))
        return self.linear2(x)


def cal_loss(pred: torch.Tensor, gold: torch.Tensor, smoothing: bool = True) -> torch.Tensor:
    if not smoothing:
        return F.cross_entropy(pred, gold)
    eps, n_class = 0.2, pred.size(1)
    one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
    one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
    return -(one_hot * F.log_softmax(pred, dim=1)).sum(dim=1).mean()


def sample_scan(kind: int, n: int, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(n, 2, generator=gen)
    theta, z = 2 * math.pi * u[:, 0], 2 * u[:, 1] - 1
    if kind == 0:
        r = torch.sqrt(1 - z**2)
    elif kind == 1:
        r = torch.ones(n)
    elif kind == 2:
        r = (1 - z) / 2
    else:
        r = 0.5 + 0.25 * torch.cos(3 * theta)
    pts = torch.stack([r * torch.cos(theta), r * torch.sin(theta), z], dim=1)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen))
    return pts @ q + 0.02 * torch.randn(n, 3, generator=gen)


class ScanDataset:
    def __init__(self, args: PCTArgs, size: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, args.output_channels, (size,), generator=gen)
        self.num_points = torch.randint(
            args.min_points, args.max_points + 1, (size,), generator=gen
        )
        self.data = torch.zeros(size, args.max_points, 3)
        for i in range(size):
            self.data[i, : self.num_points[i]] = sample_scan(
                int(self.labels[i]), int(self.num_points[i]), gen
            )

    def batches(self, batch_size: int, shuffle: bool, gen: torch.Generator | None = None):
        order = (
            torch.randperm(len(self.labels), generator=gen)
            if shuffle
            else torch.arange(len(self.labels))
        )
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            yield self.data[idx].permute(0, 2, 1), self.num_points[idx], self.labels[idx]


def test(model: SPct, loader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for data, num_points, label in loader:
            correct += (model(data, num_points).argmax(dim=1) == label).sum().item()
            total += label.numel()
    model.train()
    return correct / total


if __name__ == "__main__":
    torch.manual_seed(0)
    args = PCTArgs()
    train_set, test_set = ScanDataset(args, 256, seed=0), ScanDataset(args, 128, seed=1)
    model = SPct(args)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(0)
    for epoch in range(4):
        for data, num_points, label in train_set.batches(16, shuffle=True, gen=gen):
            loss = cal_loss(model(data, num_points), label)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        acc = test(model, test_set.batches(32, shuffle=False))
        print(f"epoch {epoch} loss {loss.item():.3f} test acc {acc:.3f}")
    model.eval()
    data, num_points, _ = next(test_set.batches(8, shuffle=False))
    i = int(num_points.argmin())
    with torch.no_grad():
        batched = model(data, num_points)[i]
        alone = model(data[i : i + 1, :, : num_points[i]], num_points[i : i + 1])[0]
    print("sparsest scan alone vs batched", (alone - batched).abs().max().item())
