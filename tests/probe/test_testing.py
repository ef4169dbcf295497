"""maskcheck.testing: the pytest helpers pass on correct modules and fail with the report."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import zoo

from maskcheck.testing import (
    assert_batch_isolated,
    assert_causal,
    assert_no_nan_on_boundaries,
    assert_padding_invariant,
)

ROOT = Path(__file__).resolve().parents[2]


def test_assert_causal_fails_with_the_report_text() -> None:
    with pytest.raises(AssertionError) as info:
        assert_causal(zoo.missing_causal_mask(), seq=5, padding_side="right")
    text = str(info.value)
    assert "maskcheck probe" in text and "MC070 error future-leak" in text
    assert "dependency of sequence" in text and "FAIL  MC070 causality (right padding)" in text


def test_assert_causal_also_catches_a_masked_diagonal() -> None:
    with pytest.raises(AssertionError, match="MC075 error blind-spot"):
        assert_causal(zoo.diagonal_masked(), seq=5, padding_side="right")


def test_each_helper_fails_on_its_bug() -> None:
    with pytest.raises(AssertionError, match="MC071 error padding-leak"):
        assert_padding_invariant(zoo.mean_pool_over_pads(), seq=5)
    with pytest.raises(AssertionError, match="MC073 error batch-leak"):
        assert_batch_isolated(zoo.view_instead_of_transpose(), seq=5, padding_side="right")
    with pytest.raises(AssertionError, match="MC074 error nan-in-real-output"):
        assert_no_nan_on_boundaries(zoo.fp16_minus_1e9_two_layers(), seq=5, dtype="float16")


def test_a_helper_checks_only_its_rules() -> None:
    # The masked mean over pads is a padding bug, not a causality bug: assert_batch_isolated
    # passes on it and reports only MC073's check.
    report = assert_batch_isolated(zoo.mean_pool_over_pads(), seq=5, padding_side="right")
    assert {c.code for c in report.checks} == {"MC073"}


def test_example_test_file_passes() -> None:
    tests = runpy.run_path(str(ROOT / "examples" / "test_attention_masks.py"))
    names = [n for n in tests if n.startswith("test_")]
    assert len(names) == 4
    for name in names:
        tests[name]()
