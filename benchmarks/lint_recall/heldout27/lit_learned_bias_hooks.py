"""Fixed-length sensor encoder as a LightningModule: a learned (heads, L, L) attention bias
limited to a local window, a forward hook that logs the attention entropy, and a
`register_buffer(persistent=False)` for the window.

Source: seed masked_fill_inplace.txt (sections 梯度计算风险 and 与模型缓冲区的配合).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:
    from lightning import LightningModule
except ImportError:  # the venv has no lightning

    class LightningModule(nn.Module):  # type: ignore[no-redef]
        def log(self, name: str, value: Tensor | float, **kwargs: Any) -> None:
            print(f"{name} = {float(value):.4f}")


class WindowAttention(nn.Module):
    def __init__(self, dim: int, heads: int, length: int, window: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.pos_bias = nn.Parameter(torch.zeros(heads, length, length))
        i = torch.arange(length)
        self.register_buffer("outside", (i[:, None] - i[None, :]).abs() > window, persistent=False)
        self.last_weights: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        bias = self.pos_bias.masked_fill_(self.outside, float("-inf"))  # expect: MC505 parameter
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + bias
        weights = scores.softmax(dim=-1)
        self.last_weights = weights.detach()
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, c))


def entropy_hook(module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> None:
    w = module.last_weights
    if w is not None:
        module.entropy = float(-(w * w.clamp_min(1e-12).log()).sum(-1).mean())


class SensorEncoder(LightningModule):
    def __init__(self, channels: int = 6, dim: int = 32, length: int = 12, window: int = 2) -> None:
        super().__init__()
        self.inp = nn.Linear(channels, dim)
        self.attn = WindowAttention(dim, 4, length, window)
        self.attn.register_forward_hook(entropy_hook)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 3)

    def forward(self, x: Tensor) -> Tensor:
        h = self.inp(x)
        h = h + self.attn(self.norm(h))
        return self.head(h.mean(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss.detach())
        self.log("attn_entropy", self.attn.entropy)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> None:
    torch.manual_seed(0)
    model = SensorEncoder()
    opt = model.configure_optimizers()
    x, y = torch.randn(8, 12, 6), torch.randint(0, 3, (8,))
    for step in range(3):
        try:
            loss = model.training_step((x, y), step)
        except RuntimeError as err:
            print("training_step failed:", str(err).splitlines()[0])
            return
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = model.attn.last_weights
    print("weight outside the window", float(w[..., model.attn.outside].sum()))


if __name__ == "__main__":
    main()
