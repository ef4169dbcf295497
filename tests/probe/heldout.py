"""Held-out modules: written after the tolerances and checks were frozen, from the seed
article's own helpers and common torch idioms; nothing here was used to tune the probe."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

E, H = 16, 2


def generate_causal_mask(sz: int) -> torch.Tensor:
    """The seed article's causal mask: -inf above the diagonal, 0 elsewhere."""
    return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)


def create_local_mask(sz: int, window_size: int) -> torch.Tensor:
    """The seed article's local window (keys i - w//2 .. i + w//2)."""
    mask = torch.zeros(sz, sz)
    for i in range(sz):
        start = max(0, i - window_size // 2)
        end = min(sz, i + window_size // 2 + 1)
        mask[i, :start] = float("-inf")
        mask[i, end:] = float("-inf")
    return mask


def create_block_mask(sz: int, block_size: int) -> torch.Tensor:
    """The seed article's block mask, as published: the last line masks everything."""
    mask = torch.zeros(sz, sz)
    for i in range(0, sz, block_size):
        mask[i:i + block_size, i:i + block_size] = 0
    mask[mask == 0] = float("-inf")  # maskcheck: ignore[MC504]
    return mask


class Mha(nn.Module):
    embed_dim = E

    def __init__(self, structure: str = "none", padding: str = "pad") -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(E, H, batch_first=True)
        self.structure, self.padding = structure, padding

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        attn_mask = {
            "none": None,
            "causal": generate_causal_mask(length),
            "local3": create_local_mask(length, 3),
            "block2": create_block_mask(length, 2),
        }[self.structure]
        kpm = ~keep if self.padding == "pad" else keep  # "keep": the HF mask passed as is
        y, _ = self.mha(x, x, x, attn_mask=attn_mask, key_padding_mask=kpm,
                        need_weights=False)
        return y


class EncoderLayer(nn.Module):
    embed_dim = E

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
        self.causal = causal

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length) if self.causal else None
        return self.layer(x, src_mask=mask, src_key_padding_mask=~keep, is_causal=self.causal)


class SdpaQueryAxisPadding(nn.Module):
    """The padding mask laid along the query axis (N, 1, L, 1): hides pad queries' rows, not
    pad keys."""

    embed_dim = E

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(E, 3 * E)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, H, E // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, :, None])
        return y.transpose(1, 2).reshape(n, length, E)


class SdpaCausalOnly(nn.Module):
    """is_causal=True and no padding mask: harmless with right padding (pads come after every
    real token), a leak with left padding."""

    embed_dim = E

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(E, 3 * E)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, H, E // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(n, length, E)


# name -> (factory, intent, window, codes expected; empty = correct)
CASES: dict[str, tuple[object, str, int | None, set[str]]] = {
    "mha_seed_causal_mask": (lambda: Mha("causal"), "causal", None, set()),
    "mha_seed_local_window": (lambda: Mha("local3"), "bidirectional", 2, set()),
    "encoder_layer_padding": (lambda: EncoderLayer(False), "bidirectional", None, set()),
    # Everything masked: on torch 2.13 MHA's need_weights=False path returns zeros for rows
    # with no key (no NaN), so no position influences any output: blind spots.
    "mha_seed_block_mask": (lambda: Mha("block2"), "bidirectional", None, {"MC075"}),
    "mha_keep_as_key_padding": (lambda: Mha("none", "keep"), "bidirectional", None,
                                {"MC071", "MC075"}),
    "sdpa_query_axis_padding": (SdpaQueryAxisPadding, "bidirectional", None, {"MC071"}),
    "sdpa_causal_without_padding": (SdpaCausalOnly, "causal", None, {"MC071"}),
}
