"""Held-out 6: the eager reference for an LLM runtime's KV caches, where every multi-token step is
declared causal and handed to SDPA's `is_causal`.

Source: pytorch/executorch PR #21749 ("Fix off-graph KV-cache causal alignment: add explicit masks":
the reference cache declared CAUSAL for every multi-token step and `attend()` applied torch's
`is_causal`, which is upper-left aligned when the query and key lengths differ, so a chunked or
multi-turn prefill hid the prior context -- the second chunk's first query attended key 0 alone).
Surroundings: a mask-kind enum and spec dataclass, a contiguous cache whose `update_and_fetch`
returns the cached keys with the new ones appended and chooses the kind, an `attend` function that
turns the kind into the flag, and a chunked-prefill driver.
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
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        kind = MaskKind.CAUSAL if k.shape[-2] > 1 else MaskKind.NONE
        return self.keys, self.values, AttendSpec(kind)


def attend(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
           cache: ContiguousCache) -> torch.Tensor:
    keys, values, spec = cache.update_and_fetch(k_new, v_new)
    causal = spec.kind is MaskKind.CAUSAL
    return F.scaled_dot_product_attention(q, keys, values, is_causal=causal)  # expect: MC510 function


def chunked_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    cache = ContiguousCache()
    outs = []
    for start in range(0, q.shape[-2], chunk):
        sl = slice(start, start + chunk)
        outs.append(attend(q[..., sl, :], k[..., sl, :], v[..., sl, :], cache))
    return torch.cat(outs, dim=-2)
