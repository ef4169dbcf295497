"""MC507: scores filled with -inf where a pair mask (a mask on the query axis AND-ed or
multiplied in) is False, then softmax (pytorch/pytorch#103749, Biohub/esm#299). Each bad
source next to the findings it must give, its correct form next to none, and the torch 2.13
facts the rule rests on (CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


def test_a_pair_mask_makes_padded_rows_nan_and_the_next_layer_spreads_it() -> None:
    keep = torch.tensor([[True, True, False]])
    pair = keep[:, :, None] & keep[:, None, :]
    torch.manual_seed(0)
    x = torch.randn(1, 3, 4)
    rows = []
    for _ in range(2):
        weights = (x @ x.transpose(-1, -2)).masked_fill(~pair, float("-inf")).softmax(-1)
        x = weights @ x
        rows.append(x.isnan().any(-1)[0].tolist())
    assert rows == [[False, False, True], [True, True, True]]


def test_finfo_min_and_key_only_masks_stay_finite() -> None:
    keep = torch.tensor([[True, True, False]])
    pair = keep[:, :, None] & keep[:, None, :]
    scores = torch.randn(1, 3, 3)
    low = scores.masked_fill(~pair, torch.finfo(scores.dtype).min).softmax(-1)
    assert not low.isnan().any()  # the padded row is uniform, not NaN
    keys = scores.masked_fill(~keep[:, None, :], float("-inf")).softmax(-1)
    assert not keys.isnan().any()


def test_sdpa_returns_zeros_for_an_empty_row() -> None:
    keep = torch.tensor([[True, True, False]])
    q = torch.randn(1, 1, 3, 4)
    pair = keep[:, :, None] & keep[:, None, :]
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=pair[:, None])
    assert torch.equal(out[0, 0, 2], torch.zeros(4))


PAIR = """\
import torch

def attend(scores, keep, v):
    pair = keep[:, :, None] & keep[:, None, :]
    scores = scores.masked_fill(~pair, float("-inf"))
    return scores.softmax(-1) @ v
"""


@pytest.mark.parametrize("spelled", [
    "keep[:, :, None] & keep[:, None, :]", "keep.unsqueeze(-1) & keep.unsqueeze(-2)",
    "keep.unsqueeze(2) & keep.unsqueeze(1)", "keep[:, None] & keep[:, :, None]",
    "keep[..., None] * keep[..., None, :]", "torch.ones_like(scores).bool() & keep[..., None]",
])
def test_pair_masks_filled_with_minus_inf(found: Found, spelled: str) -> None:
    assert found(PAIR.replace("keep[:, :, None] & keep[:, None, :]", spelled)) == [(5, "MC507")]


@pytest.mark.parametrize("fixed", [
    ('float("-inf")', "torch.finfo(scores.dtype).min"),
    ('float("-inf")', "-1e4"),
    ("keep[:, :, None] & keep[:, None, :]", "keep[:, None, :] & keep[:, None, :]"),
    ("keep[:, :, None] & keep[:, None, :]", "causal[None] & keep[:, None, :]"),
    ("return scores.softmax(-1) @ v",
     "w = scores.softmax(-1)\n    return w.masked_fill(~pair, 0.0) @ v"),
    ("return scores.softmax(-1) @ v", "return scores.softmax(-1).nan_to_num() @ v"),
    ("return scores.softmax(-1) @ v", "return scores @ v"),
])
def test_what_is_silent(found: Found, fixed: tuple[str, str]) -> None:
    assert found(PAIR.replace(*fixed)) == []


def test_a_fill_thrown_away_is_mc525_only(found: Found) -> None:
    # zeta's multi_modal_causal_attention: the -inf never lands, so no row is emptied yet
    thrown = PAIR.replace("scores = scores.masked_fill(~pair", "scores.masked_fill(~pair")
    assert found(thrown) == [(5, "MC525")]
    in_place = PAIR.replace("scores = scores.masked_fill(~pair", "scores.masked_fill_(~pair")
    assert found(in_place) == [(5, "MC507")]


def test_a_query_axis_factor_keeps_the_products_dtype(found: Found) -> None:
    # `h.float() * keep.unsqueeze(-1)` is float32 whatever else it is: no float16 overflow
    src = """\
import torch

def f(h, keep):
    scores = h.float() * keep.unsqueeze(-1)
    return scores.masked_fill(~keep[:, None], -1e9).softmax(-1)

model = torch.nn.Linear(2, 2).half()
"""
    assert found(src) == []
    assert found(src.replace("h.float()", "h")) == [(5, "MC501")]
