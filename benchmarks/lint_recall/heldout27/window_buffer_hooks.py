"""Speech-frame decoder with an optional sliding window chosen per call (`window: int | None`),
the causal bias kept in a non-persistent buffer, and a Lightning-style validation hook that
evaluates with a short window before the full-context evaluation.

Source: seed masked_fill_inplace.txt (sections 与模型缓冲区的配合 and 张量共享内存风险),
conventions.md §1 (nn.Transformer row).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class WindowedCausalAttention(nn.Module):
    def __init__(self, dim: int, heads: int, max_frames: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        bias = torch.triu(torch.full((max_frames, max_frames), float("-inf")), diagonal=1)
        self.register_buffer("bias", bias, persistent=False)
        i = torch.arange(max_frames)
        self.register_buffer("distance", i[:, None] - i[None, :], persistent=False)

    def forward(self, x: Tensor, window: int | None = None) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        bias = self.bias
        if window is not None:
            bias = self.bias.masked_fill_(self.distance >= window, float("-inf"))  # expect: MC524 persistent
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + bias[:t, :t]
        return self.out((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c))


class FrameDecoder(nn.Module):
    def __init__(self, feats: int = 20, dim: int = 32, heads: int = 4, max_frames: int = 32) -> None:
        super().__init__()
        self.inp = nn.Linear(feats, dim)
        self.attn = WindowedCausalAttention(dim, heads, max_frames)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, feats)

    def forward(self, frames: Tensor, window: int | None = None) -> Tensor:
        h = self.inp(frames)
        h = h + self.attn(self.norm(h), window=window)
        return self.out(h)

    @torch.no_grad()
    def on_validation_epoch_start(self, frames: Tensor, windows: tuple[int | None, ...] = (4, None)) -> dict[str, float]:
        target = frames[:, 1:]
        return {f"val_mse_w{w}": float(((self(frames[:, :-1], window=w) - target) ** 2).mean()) for w in windows}


def main() -> None:
    torch.manual_seed(0)
    model = FrameDecoder().eval()
    frames = torch.randn(2, 16, 20)
    with torch.no_grad():
        full_before = model(frames)
    print(model.on_validation_epoch_start(frames))
    with torch.no_grad():
        full_after = model(frames)
    print("full-context output before vs after the windowed pass, max diff", (full_after - full_before).abs().max().item())
    print("-inf cells in the buffer", int(torch.isinf(model.attn.bias).sum()), "of", model.attn.bias.numel())


if __name__ == "__main__":
    main()
