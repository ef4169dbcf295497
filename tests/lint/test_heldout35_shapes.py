"""The shapes of held-out 35 (code, retrieval, translation and classic NLP) that its first
reading missed, each bad source next to the findings it must give, its correct form next to
none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# OpenNMT-py's decoder builds its look-ahead mask with the in-place `tril_()`/`triu_(1)`.
LOOK_AHEAD = """\
import torch


def attend(scores, n):
    future = torch.ones(n, n, dtype=torch.bool).tril_()
    return scores.masked_fill(future, float("-inf")).softmax(-1)
"""


def test_the_in_place_triangle_returns_the_triangle() -> None:
    ones = torch.ones(3, 3, dtype=torch.bool)
    assert torch.equal(ones.clone().tril_(), ones.tril())
    weights = torch.zeros(3, 3).masked_fill(ones.clone().tril_(), float("-inf")).softmax(-1)
    assert weights[0, 0] == 0 and weights[0, 1:].sum() == 1  # the first query sees the future
    assert torch.isnan(weights[2]).all()  # and the last hides every key


def test_an_in_place_triangle_is_a_triangle(found: Found) -> None:
    assert found(LOOK_AHEAD) == [(6, "MC521")]
    assert found(LOOK_AHEAD.replace("tril_()", "triu_(1)")) == []
