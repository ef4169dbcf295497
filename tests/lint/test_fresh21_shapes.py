"""The shapes of fresh21's false findings that the linter can tell from source, each next to the
findings it must give, and the torch 2.13 facts they rest on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# symupe's token-masking collator: the values to rank are int64 (`arange`) on three branches
# and float32 (`rand`) on the last; -1e9 is a top-k sentinel, never a float16 fill.
TOPK_SENTINEL = """\
import torch


def sample_masked(mask, level, b, t, max_masked):
    if level == 0:
        values = torch.arange(t, 0, -1)[None].repeat(b, 1)
    elif level == 1:
        values = torch.arange(t)[None].repeat(b, 1)
    else:
        values = torch.rand((b, t))
    values = values.masked_fill(~mask, -1e9)
    return values.topk(max_masked, dim=-1).indices
"""


def test_the_sentinel_fits_int64_and_float32_but_not_float16() -> None:
    mask = torch.tensor([[True, False]])
    assert torch.arange(2)[None].dtype == torch.int64
    assert torch.rand(1, 2).dtype == torch.float32
    assert torch.arange(2)[None].masked_fill(~mask, -1e9)[0, 1] == -10**9
    assert torch.rand(1, 2).masked_fill(~mask, -1e9)[0, 1] == -1e9
    with pytest.raises(RuntimeError, match="overflow"):
        torch.rand(1, 2).half().masked_fill(~mask, -1e9)


def test_a_value_int64_or_float32_on_every_path_is_never_a_float16_fill(found: Found) -> None:
    assert found(TOPK_SENTINEL) == []
    # a path that may be half keeps the finding
    half = TOPK_SENTINEL.replace("torch.rand((b, t))", "torch.rand((b, t)).half()")
    assert found(half) == [(11, "MC501")]
    # so does a cast of the positions to another tensor's dtype
    cast = TOPK_SENTINEL.replace("torch.arange(t)[None].repeat(b, 1)",
                                 "torch.arange(t)[None].repeat(b, 1).to(mask.dtype)")
    assert found(cast) == [(11, "MC501")]
