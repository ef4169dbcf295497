"""Attention modules to probe: correct ones, and ones with the seeds' and public reports' bugs.

Every factory takes no argument and returns an nn.Module with `forward(x, keep)`:
x (N, L, E) float, keep (N, L) bool, True = real token; it returns (N, L, E).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

E, H = 16, 2


def _tril(n: int, device: torch.device, diagonal: int = 0) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(diagonal)


class SdpaAttention(nn.Module):
    """Multi-head attention on F.scaled_dot_product_attention with a bool keep mask."""

    embed_dim = E

    def __init__(self, causal: bool, window: int | None = None, invert: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(E, 3 * E)
        self.out = nn.Linear(E, E)
        self.causal, self.window, self.invert = causal, window, invert

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, H, E // H).permute(2, 0, 3, 1, 4)
        mask = (~keep if self.invert else keep)[:, None, None, :]
        i = torch.arange(length, device=x.device)
        if self.causal:
            mask = mask & _tril(length, x.device)
        if self.window is not None:
            mask = mask & ((i[:, None] - i[None, :]).abs() < self.window)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(n, length, E))


class EagerAttention(nn.Module):
    """Hand-written attention: scores, masked_fill or an additive mask, softmax. `layers` > 1
    stacks it with residuals, so NaN at a pad position of one layer reaches the next."""

    embed_dim = E

    def __init__(self, causal: bool, *, fill: str = "finfo", diagonal: int = 0,
                 additive_fp32_minus_1e9: bool = False, layers: int = 1) -> None:
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(E, 3 * E) for _ in range(layers))
        self.causal, self.fill, self.diagonal = causal, fill, diagonal
        self.additive = additive_fp32_minus_1e9

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        if len(self.qkv) == 1:
            return self._attend(self.qkv[0], x, keep)
        for qkv in self.qkv:
            x = x + self._attend(qkv, x, keep)
        return x

    def _attend(self, qkv: nn.Module, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        q, k, v = qkv(x).view(n, length, 3, H, E // H).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (E // H) ** 0.5
        allowed = keep[:, None, None, :]
        if self.causal:
            allowed = allowed & _tril(length, x.device, self.diagonal)
        if self.additive:
            # The public fp16 bug: an additive mask built in float32 with -1e9, then cast to
            # the activations' dtype (-1e9 -> -inf in float16).
            bias = (~allowed).to(torch.float32) * -1e9
            scores = scores + bias.to(scores.dtype)
        else:
            value = float("-inf") if self.fill == "-inf" else torch.finfo(scores.dtype).min
            scores = scores.masked_fill(~allowed, value)
        y = scores.softmax(-1) @ v
        return y.transpose(1, 2).reshape(n, length, E)


class MhaPadded(nn.Module):
    """nn.MultiheadAttention with key_padding_mask (True = pad), batch_first."""

    embed_dim = E

    def __init__(self, use_padding_mask: bool = True, view_bug: bool = False) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(E, H, batch_first=not view_bug)
        self.use_padding_mask, self.view_bug = use_padding_mask, view_bug

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        pad = ~keep if self.use_padding_mask else None
        if self.view_bug:
            n, length, _ = x.shape
            # (N, L, E) -> (L, N, E) with view instead of transpose: mixes the sequences.
            xt = x.view(length, n, E)
            y, _ = self.mha(xt, xt, xt, key_padding_mask=pad, need_weights=False)
            return y.view(n, length, E)
        y, _ = self.mha(x, x, x, key_padding_mask=pad, need_weights=False)
        return y


class MeanPoolContext(nn.Module):
    """Correct attention plus a sentence vector that averages over every position, pads
    included (the masked mean forgotten)."""

    embed_dim = E

    def __init__(self) -> None:
        super().__init__()
        self.attn = SdpaAttention(causal=False)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return self.attn(x, keep) + x.mean(dim=1, keepdim=True)


class SeedBufferMask(nn.Module):
    """The seed's module: a (3, 3) buffer filled in place with -1e9 above the diagonal and
    multiplied into x (an additive mask used as a multiplicative one)."""

    embed_dim = 3

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.ones(3, 3))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # The seed's code as published (its -1e9 is one of the bugs under test).
        triu = torch.triu(torch.ones(3, 3), 1).bool()
        self.mask.masked_fill_(triu, -1e9)  # maskcheck: ignore[MC501]
        return x * self.mask


class SeedMaskTimesScores(nn.Module):
    """The seed's buffer in an attention layer: the -1e9 causal mask multiplied into the
    scores instead of added (negative scores times -1e9 become huge: the future leaks)."""

    embed_dim = E

    def __init__(self, most: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(E, 3 * E)
        self.register_buffer("mask", torch.ones(most, most))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        triu = torch.triu(torch.ones_like(self.mask), 1).bool()
        self.mask.masked_fill_(triu, -1e9)  # maskcheck: ignore[MC501]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-2, -1)) * self.mask[:length, :length]
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        return scores.softmax(-1) @ v


# Correct modules: (factory, intent, window)
def sdpa_causal() -> nn.Module:
    return SdpaAttention(causal=True)


def sdpa_bidirectional() -> nn.Module:
    return SdpaAttention(causal=False)


def sdpa_sliding_window() -> nn.Module:
    return SdpaAttention(causal=True, window=3)


def eager_causal_finfo() -> nn.Module:
    return EagerAttention(causal=True, fill="finfo", layers=2)


def mha_key_padding() -> nn.Module:
    return MhaPadded()


# Buggy modules
def missing_causal_mask() -> nn.Module:
    return SdpaAttention(causal=False)


def inverted_padding_mask() -> nn.Module:
    return SdpaAttention(causal=False, invert=True)


def mha_without_padding_mask() -> nn.Module:
    return MhaPadded(use_padding_mask=False)


def mean_pool_over_pads() -> nn.Module:
    return MeanPoolContext()


def view_instead_of_transpose() -> nn.Module:
    return MhaPadded(view_bug=True)


def diagonal_masked() -> nn.Module:
    return EagerAttention(causal=True, fill="-inf", diagonal=-1)


def fp16_minus_1e9_two_layers() -> nn.Module:
    return EagerAttention(causal=True, additive_fp32_minus_1e9=True, layers=2)


def seed_buffer_mask() -> nn.Module:
    return SeedBufferMask()


def seed_mask_times_scores() -> nn.Module:
    return SeedMaskTimesScores()


def window_off_by_one() -> nn.Module:
    return SdpaAttention(causal=True, window=4)  # probed with --window 3


def raises_on_length_one() -> nn.Module:
    class Strict(SdpaAttention):
        def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
            if x.shape[1] < 2:
                raise ValueError("sequence too short")
            return super().forward(x, keep)

    return Strict(causal=True)


def plain_function() -> object:
    def f(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        w = keep[:, None, :].to(x.dtype)
        pooled = (w @ x) / w.sum(-1, keepdim=True)  # masked mean over the real tokens
        return x + pooled.expand_as(x)

    return f


def returns_a_number() -> object:
    return 42


def noisy() -> nn.Module:
    class Noisy(SdpaAttention):
        def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
            return super().forward(x, keep) + 1e-3 * torch.randn_like(x)

    return Noisy(causal=True)
