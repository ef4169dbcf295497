"""Layouts, perturbation plans and intent: plain Python."""

from __future__ import annotations

import pytest

from maskcheck.probe.intent import Intent, blind_threshold, tolerance
from maskcheck.probe.layout import (
    Layout,
    alone,
    base_layout,
    pad_amounts,
    perturbed_positions,
    with_empty_row,
)


def test_batch_mixes_lengths() -> None:
    assert pad_amounts(3, 2) == [0, 2, 1]
    assert pad_amounts(5, 2) == [0, 2, 1, 2, 1]
    assert pad_amounts(2, 0) == [0, 0]
    assert base_layout(3, 8, 2, "right").lengths == (8, 6, 7)


def test_left_and_right_layouts() -> None:
    right = base_layout(2, 5, 2, "right")
    left = base_layout(2, 5, 2, "left")
    assert right.keep()[1] == [True, True, True, False, False]
    assert left.keep()[1] == [False, False, True, True, True]
    assert left.token(1, 2) == 0 and left.token(1, 1) is None
    assert left.position(1, 2) == 4 and right.position(1, 2) == 2


def test_boundary_layouts() -> None:
    empty = with_empty_row(base_layout(2, 4, 1, "left"))
    assert empty.lengths == (4, 3, 0) and empty.keep()[2] == [False] * 4
    assert alone(1, 3) == Layout((1,), (3,), 3, "right")


def test_positions_spread_evenly_with_both_ends() -> None:
    assert perturbed_positions(8, None) == list(range(8))
    assert perturbed_positions(8, 3) == [0, 4, 7]  # round(3.5) == 4 (banker's rounding)
    assert perturbed_positions(8, 1) == [7]
    assert perturbed_positions(4, 9) == [0, 1, 2, 3]


def test_intent() -> None:
    causal, bidir = Intent("causal"), Intent("bidirectional")
    assert causal.allows(3, 3) and causal.allows(3, 0) and not causal.allows(3, 4)
    assert bidir.allows(0, 7)
    window = Intent("causal", 3)
    assert window.allows(5, 3) and not window.allows(5, 2)
    assert window.excluded_by(5, 2) == "window" and window.excluded_by(5, 6) == "future"
    assert Intent("bidirectional", 2).excluded_by(4, 6) == "window"
    assert Intent("bidirectional", 2).allows(4, 5)


def test_tolerance_is_dtype_aware() -> None:
    assert tolerance("float32") == 1e-4 and tolerance("float16") == 1e-2
    assert tolerance("bfloat16") == 3e-2
    assert blind_threshold("float32") == pytest.approx(1e-6)
