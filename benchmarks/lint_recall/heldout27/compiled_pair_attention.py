"""Set encoder for variable-size point clouds: the attention kernel is a typed function under
`@torch.compile` (the eager backend on machines without a GPU), two layers, masked max pooling.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md §3 items 5 and 22).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

BACKEND = "inductor" if torch.cuda.is_available() else "eager"


class PointBatch(NamedTuple):
    points: Tensor  # (batch, n, 3)
    keep: Tensor  # (batch, n) bool, True = a real point


@torch.compile(backend=BACKEND, dynamic=False)
def masked_attention(q: Tensor, k: Tensor, v: Tensor, keep: Tensor) -> Tensor:
    pair = keep[:, :, None] & keep[:, None, :]
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~pair[:, None], float("-inf"))  # expect: MC507 compile
    return scores.softmax(dim=-1) @ v


class SetBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = masked_attention(q, k, v, keep)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(x)


class SetEncoder(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2, classes: int = 5) -> None:
        super().__init__()
        self.inp = nn.Linear(3, dim)
        self.blocks = nn.ModuleList(SetBlock(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, batch: PointBatch) -> Tensor:
        x = self.inp(batch.points)
        for block in self.blocks:
            x = block(x, batch.keep)
        x = x.masked_fill(~batch.keep[..., None], torch.finfo(x.dtype).min)
        return self.head(x.amax(dim=1))


def pad_clouds(clouds: list[Tensor]) -> PointBatch:
    n = max(c.shape[0] for c in clouds)
    points = torch.zeros(len(clouds), n, 3)
    keep = torch.zeros(len(clouds), n, dtype=torch.bool)
    for i, c in enumerate(clouds):
        points[i, : c.shape[0]] = c
        keep[i, : c.shape[0]] = True
    return PointBatch(points, keep)


def main() -> None:
    torch.manual_seed(0)
    model = SetEncoder().eval()
    clouds = [torch.randn(9, 3), torch.randn(6, 3), torch.randn(4, 3)]
    with torch.no_grad():
        logits = model(pad_clouds(clouds))
        print("NaN logits per cloud", torch.isnan(logits).any(-1).tolist())
        for i, c in enumerate(clouds):
            alone = model(pad_clouds([c]))
            print(f"cloud {i}: batched vs alone max diff {(logits[i] - alone[0]).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
