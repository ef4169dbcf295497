"""Held-out 6 twin: the reference cache passing an explicit lower-right band when the query chunk
continues a cached prefix, and the causal flag only for a fresh square prefill.

Source: the fix in pytorch/executorch PR #21749 (an EXPLICIT mask kind with a lower-right band for a
continuation; CAUSAL only for a fresh square prefill; NONE for a one-token decode).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F


class MaskKind(enum.Enum):
    NONE = "none"
    CAUSAL = "causal"


@dataclass
class AttendSpec:
    kind: MaskKind
    mask: Optional[torch.Tensor] = None


class ContiguousCache:
    """Keys and values of shape (B, H, T, D), grown along T."""

    def __init__(self) -> None:
        self.keys: Optional[torch.Tensor] = None
        self.values: Optional[torch.Tensor] = None

    @property
    def offset(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def update_and_fetch(self, k: torch.Tensor, v: torch.Tensor
                         ) -> Tuple[torch.Tensor, torch.Tensor, AttendSpec]:
        start = self.offset
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        q_len, kv_len = k.shape[-2], self.keys.shape[-2]
        if q_len == 1:
            return self.keys, self.values, AttendSpec(MaskKind.NONE)
        if start == 0:
            return self.keys, self.values, AttendSpec(MaskKind.CAUSAL)
        band = torch.ones(q_len, kv_len, dtype=torch.bool, device=k.device).tril(diagonal=kv_len - q_len)
        return self.keys, self.values, AttendSpec(MaskKind.NONE, band)


def attend(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
           cache: ContiguousCache) -> torch.Tensor:
    keys, values, spec = cache.update_and_fetch(k_new, v_new)
    if spec.kind is MaskKind.CAUSAL:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=spec.mask)


def chunked_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    cache = ContiguousCache()
    outs = []
    for start in range(0, q.shape[-2], chunk):
        sl = slice(start, start + chunk)
        outs.append(attend(q[..., sl, :], k[..., sl, :], v[..., sl, :], cache))
    return torch.cat(outs, dim=-2)
