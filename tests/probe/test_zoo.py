"""The zoo, probed: every bug reported with its code, no finding on a correct module."""

from __future__ import annotations

import pytest
import zoo

import maskcheck
from maskcheck.probe.report import ProbeReport

# (factory, intent, window)
CORRECT = [
    ("sdpa_causal", "causal", None),
    ("sdpa_bidirectional", "bidirectional", None),
    ("sdpa_sliding_window", "causal", 3),
    ("eager_causal_finfo", "causal", None),
    ("mha_key_padding", "bidirectional", None),
    ("plain_function", "bidirectional", None),
]
# (factory, intent, window, codes that must be reported)
BUGGY = [
    ("missing_causal_mask", "causal", None, {"MC070"}),
    ("seed_mask_times_scores", "causal", None, {"MC070"}),
    ("inverted_padding_mask", "bidirectional", None, {"MC071", "MC075"}),
    ("mha_without_padding_mask", "bidirectional", None, {"MC071", "MC072"}),
    ("mean_pool_over_pads", "bidirectional", None, {"MC071", "MC072"}),
    ("view_instead_of_transpose", "bidirectional", None, {"MC073"}),
    ("diagonal_masked", "causal", None, {"MC074", "MC075"}),
    ("window_off_by_one", "causal", 3, {"MC077"}),
]


def run(name: str, intent: str, window: int | None, dtype: str, **options: object) -> ProbeReport:
    return maskcheck.probe(getattr(zoo, name)(), intent, window=window, dtype=dtype, seq=6,
                           **options)


def failed(report: ProbeReport) -> list[str]:
    return [f"{c.title}: {c.status}: {c.message}" for c in report.checks
            if c.status in ("fail", "error")]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("name", "intent", "window"), CORRECT)
def test_correct_module_is_clean(name: str, intent: str, window: int | None,
                                 dtype: str) -> None:
    report = run(name, intent, window, dtype)
    assert report.findings == [], failed(report)
    assert failed(report) == []
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["boundaries"] == "pass" and statuses["padding"] == "pass"


@pytest.mark.parametrize(("name", "intent", "window", "codes"), BUGGY)
def test_bug_is_reported_with_its_code_float32(name: str, intent: str, window: int | None,
                                               codes: set[str]) -> None:
    report = run(name, intent, window, "float32")
    assert codes <= report.codes(), failed(report)


@pytest.mark.parametrize(("name", "intent", "window", "codes"), [
    b for b in BUGGY if b[0] in ("missing_causal_mask", "inverted_padding_mask",
                                 "view_instead_of_transpose", "diagonal_masked")])
def test_bug_is_reported_with_its_code_float16(name: str, intent: str, window: int | None,
                                               codes: set[str]) -> None:
    report = run(name, intent, window, "float16")
    assert codes <= report.codes(), failed(report)


def test_fp16_minus_1e9_mask_gives_nan_on_real_tokens_only_in_float16() -> None:
    # -1e9 survives in float32 (exp underflows to 0, the pad rows are uniform); cast to float16
    # it is -inf, left-padded pad queries see no key, their NaN reaches the real tokens of the
    # second layer through 0 * NaN.
    assert run("fp16_minus_1e9_two_layers", "causal", None, "float32").findings == []
    report = run("fp16_minus_1e9_two_layers", "causal", None, "float16")
    assert "MC074" in report.codes()
    mc074 = next(c for c in report.checks if c.code == "MC074")
    assert "left-padded" in mc074.message and "NaN" in mc074.message


def test_seed_buffer_module_is_blind_and_raises_on_other_shapes() -> None:
    # The seed's `x * self.mask`: each position sees only itself (every earlier position is a
    # blind spot); its (3, 3) buffer fails on any other length, which errors those checks and
    # lets the run go on.
    report = maskcheck.probe(zoo.seed_buffer_mask(), "causal", seq=3, pad=1)
    assert report.codes() == {"MC075"}
    errored = {c.name for c in report.checks if c.status == "error"}
    assert errored == {"padding", "boundaries"}
    messages = {c.name: c.message for c in report.checks}
    assert "more pads: RuntimeError: The size of tensor a" in messages["padding"]
    assert "length 1: returned shape (3, 3, 3)" in messages["boundaries"]


def test_seed_buffer_module_in_float16_cannot_run() -> None:
    from maskcheck.probe.targets import TargetError

    with pytest.raises(TargetError, match="cannot be converted to type c10::Half"):
        maskcheck.probe(zoo.seed_buffer_mask(), "causal", seq=3, pad=1, dtype="float16")


def test_dependency_matrix_marks_the_leak() -> None:
    report = run("missing_causal_mask", "causal", None, "float32", padding_side="right")
    dep = report.dependency
    assert dep is not None
    row = dep.sequence
    size = len(dep.real)
    for q in range(size):
        for k in range(size):
            if dep.real[q] and dep.real[k]:
                assert dep.intended[q][k] == int(k <= q)
                value = dep.measured[q][k]
                assert value is not None and value > report.tolerance, (row, q, k)
            if not dep.real[k]:
                assert dep.intended[q][k] == 0


def test_positions_bound_the_forward_passes() -> None:
    full = run("sdpa_causal", "causal", None, "float32", padding_side="right",
               select=["MC070"])
    capped = run("sdpa_causal", "causal", None, "float32", padding_side="right",
                 select=["MC070"], positions=2)
    # The sweep is 1 + N * P passes: N = 3 sequences, P = 6 positions or 2.
    assert full.forward_passes - capped.forward_passes == 3 * (6 - 2)
    assert capped.dependency is not None
    assert capped.dependency.measured[5][2] is None  # key 2 was not changed
    assert capped.findings == []


def test_a_target_that_raises_on_a_boundary_batch_errors_that_check_only() -> None:
    report = maskcheck.probe(zoo.raises_on_length_one(), "causal", seq=6)
    boundaries = next(c for c in report.checks if c.name == "boundaries")
    assert boundaries.status == "error"
    assert "length 1" in boundaries.message and "sequence too short" in boundaries.message
    assert all(c.status == "pass" for c in report.checks if c.name != "boundaries")
    assert report.findings == []


def test_a_batch_without_padding_skips_what_needs_pads() -> None:
    report = run("sdpa_causal", "causal", None, "float32", batch=1, padding_side="right")
    status = {c.name: (c.status, c.message) for c in report.checks}
    assert status["pad-content"][0] == "skipped" and "--batch 1" in status["pad-content"][1]
    assert status["batch-isolation"][0] == "skipped"
    assert status["causality"][0] == "pass" and report.findings == []
