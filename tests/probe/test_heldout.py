"""The held-out modules (tests/probe/heldout.py), judged with the frozen probe."""

from __future__ import annotations

import heldout
import pytest

import maskcheck


@pytest.mark.filterwarnings("ignore::UserWarning")  # MHA warns about the keep-as-padding bug
@pytest.mark.parametrize("name", sorted(heldout.CASES))
def test_heldout_module(name: str) -> None:
    factory, intent, window, expected = heldout.CASES[name]
    assert callable(factory)
    report = maskcheck.probe(factory(), intent, window=window, seq=6)
    if expected:
        assert expected <= report.codes()
    else:
        assert report.findings == [], [c.message for c in report.checks if c.status == "fail"]
        assert all(c.status == "pass" for c in report.checks)
