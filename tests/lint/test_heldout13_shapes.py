"""Real code shapes behind the misses of the thirteenth held-out recall set (known bugs
re-spelled in surroundings no other set uses, written apart from the engine): each bad source
next to the findings it must give, its correct form next to none (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# The -1e9 fill held by an Enum member (or a class attribute) of the file.
ENUM_FILL = '''from enum import Enum

import torch


class MaskValue(float, Enum):
    KEEP = 0.0
    PAD = -1e9


def pool(scores, pad):
    scores = scores.masked_fill(pad, MaskValue.PAD)
    return scores.softmax(dim=-1)
'''


def test_a_large_fill_held_by_an_enum_member_is_found(found: Found) -> None:
    assert found(ENUM_FILL) == [(12, "MC501")]


def test_a_finite_enum_fill_is_silent(found: Found) -> None:
    assert found(ENUM_FILL.replace("PAD = -1e9", "PAD = -1e4")) == []


def test_the_enum_fill_overflows_float16() -> None:
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=torch.float16).masked_fill(torch.tensor([True, False]), -1e9)


# SDPA taken with getattr (a fallback for old torch), with cached keys and is_causal=True.
GETATTR_SDPA = '''import torch
import torch.nn.functional as F

_sdpa = getattr(F, "scaled_dot_product_attention", None)


def attend(q, k, v, past=None):
    if past is not None:
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    return _sdpa(q, k, v, is_causal=True)
'''


def test_sdpa_taken_with_getattr_is_sdpa(found: Found) -> None:
    assert found(GETATTR_SDPA) == [(11, "MC510")]


def test_sdpa_taken_with_getattr_without_a_cache_is_silent(found: Found) -> None:
    source = GETATTR_SDPA.replace("    return _sdpa(q, k, v, is_causal=True)",
                                  "    return _sdpa(q, k, v, is_causal=past is None)")
    assert found(source) == []


# Two finfo.min masks returned as a tuple and summed by the caller.
TUPLE_MASKS = '''import torch


def build_masks(lengths, n, dtype):
    neg = torch.finfo(dtype).min
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    causal = torch.zeros(n, n, dtype=dtype).masked_fill(future, neg)
    is_pad = torch.arange(n)[None, :] >= lengths[:, None]
    padding = torch.zeros(len(lengths), 1, 1, n, dtype=dtype).masked_fill(
        is_pad[:, None, None, :], neg)
    return causal, padding


def attend(scores, lengths):
    causal, padding = build_masks(lengths, scores.shape[-1], scores.dtype)
    bias = causal + padding
    return (scores + bias).softmax(dim=-1)
'''


def test_finfo_min_masks_returned_as_a_tuple_and_summed_are_found(found: Found) -> None:
    assert found(TUPLE_MASKS) == [(16, "MC513")]


def test_finfo_min_masks_returned_as_a_tuple_and_combined_are_silent(found: Found) -> None:
    assert found(TUPLE_MASKS.replace("bias = causal + padding",
                                     "bias = torch.minimum(causal, padding)")) == []


def test_two_finfo_min_masks_sum_to_minus_inf() -> None:
    neg = torch.finfo(torch.float32).min
    assert torch.isinf(torch.tensor(neg) + torch.tensor(neg))


def test_an_instance_constant_read_through_self_stays_silent(found: Found) -> None:
    # espnet's CTC prefix scorer: `self.logzero = -10000000000.0`, a float32 log-domain sentinel
    source = '''import torch


class CTCPrefixScore:
    def __init__(self, x):
        self.logzero = -10000000000.0
        self.x = x

    def initial_state(self, n):
        return torch.full((n, 2), self.logzero)
'''
    assert found(source) == []
    # torch.full without a dtype is float32, where -1e10 fits: silent through the class too
    assert found(source.replace("self.logzero)", "CTCPrefixScore.LOGZERO)").replace(
        "class CTCPrefixScore:\n", "class CTCPrefixScore:\n    LOGZERO = -1e10\n\n")) == []
