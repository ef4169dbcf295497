"""Decoder layer driven by a `@dataclass` attention config (`causal: bool = True`), SDPA with
a padding mask, and a debug path that runs the same layer under `sdpa_kernel(SDPBackend.MATH)`.

Source: pytorch/pytorch#131254, conventions.md §2.7 and §5 item 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass(frozen=True)
class AttnConfig:
    dim: int = 32
    heads: int = 4
    max_len: int = 16
    dropout: float = 0.0
    causal: bool = True
    backends: list[SDPBackend] = field(default_factory=lambda: [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])


class DecoderSelfAttention(nn.Module):
    def __init__(self, cfg: AttnConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        allowed = torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool)
        self.register_buffer("allowed", allowed.tril() if cfg.causal else allowed, persistent=False)

    def forward(self, x: Tensor, key_keep: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        keep = key_keep[:, None, None, :]
        p = self.cfg.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=p, is_causal=self.cfg.causal)  # expect: MC506 dataclass
        return self.out(y.transpose(1, 2).reshape(b, t, -1))

    @torch.no_grad()
    def reference(self, x: Tensor, key_keep: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        keep = self.allowed[:t, :t] & key_keep[:, None, None, :]
        weights = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, -1))


def main() -> None:
    torch.manual_seed(0)
    cfg = AttnConfig()
    layer = DecoderSelfAttention(cfg).eval()
    x = torch.randn(2, 7, cfg.dim)
    key_keep = torch.tensor([[True] * 7, [True] * 5 + [False, False]])
    with torch.no_grad(), sdpa_kernel(cfg.backends):
        default = layer(x, key_keep)
    print("default kernels vs eager reference, max diff", (default - layer.reference(x, key_keep)).abs().max().item())
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            math = layer(x, key_keep)
    except RuntimeError as err:
        print("MATH kernel failed:", str(err).strip())
        return
    print("default vs MATH, max diff", (default - math).abs().max().item())


if __name__ == "__main__":
    main()
