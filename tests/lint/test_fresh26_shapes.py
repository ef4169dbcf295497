"""Shapes from fresh26's first reading (real code nobody here wrote) that gave false alarms,
each next to the variant that must still be reported, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# flash-rt's Cosmos reasoner: a layer that writes its keys into a static cache at `start` and
# reads the cache back up to `start + S`, run only for the prefill (`start` is 0 at the one
# call), so the keys are the S new ones.
PREFILL_ONLY_CACHE = """\
import torch
import torch.nn.functional as F


class Reasoner:
    def __init__(self):
        self.k_cache = torch.zeros(4, 128, 8, 64)
        self.v_cache = torch.zeros(4, 128, 8, 64)

    def _layer(self, li, x, start, causal):
        S = x.shape[0]
        self.k_cache[li, start : start + S] = x
        self.v_cache[li, start : start + S] = x
        kk = self.k_cache[li, : start + S].transpose(0, 1)
        vv = self.v_cache[li, : start + S].transpose(0, 1)
        qq = x.transpose(0, 1)
        return F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal and S > 1)

    def _forward(self, x, start, causal):
        for li in range(4):
            x = self._layer(li, x, start, causal)
        return x

    def prefill(self, x):
        return self._forward(x, 0, causal=True)
"""

DECODE_TOO = PREFILL_ONLY_CACHE + """\

    def extend(self, x, pos):
        return self._forward(x, pos, causal=True)
"""


def test_a_cache_read_from_zero_holds_only_the_new_keys() -> None:
    q = torch.randn(1, 3, 4)
    cache = torch.zeros(1, 8, 4)
    start, n = 0, 3
    cache[:, start:start + n] = q
    keys = cache[:, :start + n]
    assert keys.shape[-2] == q.shape[-2]  # L == S: is_causal's top-left triangle is right
    explicit = torch.ones(n, n, dtype=torch.bool).tril()
    assert torch.allclose(F.scaled_dot_product_attention(q, keys, keys, is_causal=True),
                          F.scaled_dot_product_attention(q, keys, keys, attn_mask=explicit))


def test_a_static_cache_only_ever_read_from_zero_is_no_cache(found: Found) -> None:
    assert found(PREFILL_ONLY_CACHE) == []


def test_a_call_with_another_start_keeps_the_finding(found: Found) -> None:
    assert found(DECODE_TOO) == [(17, "MC510")]
    bound = PREFILL_ONLY_CACHE.replace(
        "kk = self.k_cache[li, : start + S].transpose(0, 1)",
        "end = start + S\n        kk = self.k_cache[li, :end]")
    assert found(bound) == []
    assert found(bound.replace("self._forward(x, 0,", "self._forward(x, 5,")) == [(18, "MC510")]
