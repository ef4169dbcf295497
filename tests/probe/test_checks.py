"""The check units and the change measure on hand-built outputs."""

from __future__ import annotations

import math

import torch

from maskcheck.probe import checks
from maskcheck.probe.engine import Run, relative_change, row_scale
from maskcheck.probe.layout import Layout
from maskcheck.probe.runner import unpack


def make_run(layout: Layout, out: torch.Tensor, label: str = "batch") -> Run:
    return Run(label, layout, torch.tensor(layout.keep()), out)


def test_relative_change_treats_the_same_nan_as_no_change() -> None:
    ref = torch.tensor([[[1.0, float("nan")], [2.0, 0.0]]])
    same = ref.clone()
    moved = torch.tensor([[[1.0, float("nan")], [2.0, float("inf")]]])
    assert relative_change(ref, same, 2.0).tolist() == [[0.0, 0.0]]
    assert relative_change(ref, moved, 2.0)[0, 1] == math.inf
    nudged = ref.clone()
    nudged[0, 1, 0] = 2.5
    assert relative_change(ref, nudged, 2.0)[0, 1] == 0.25


def test_row_scale_falls_back_for_zero_rows() -> None:
    out = torch.tensor([[[0.0, 0.0], [3.0, -4.0]]])
    assert row_scale(out, 7.0).tolist() == [[7.0, 4.0]]


def test_agreement_check_names_the_differing_tokens() -> None:
    layout = Layout((0, 1), (3, 2), 3, "left")
    ref = torch.zeros(2, 3, 4)
    ref[:, :, 0] = 1.0
    other = ref.clone()
    other[1, 2, 3] = 0.5  # sequence 1, its last real token (layout position 2)
    other[1, 0, :] = 9.0  # a pad position: never judged
    check = checks.check_agreement("implementations",
                                   [("sdpa vs eager", make_run(layout, ref),
                                     make_run(layout, other))],
                                   code="MC076", tolerance=1e-4, errors=[], what="agree")
    assert check.status == "fail" and check.where == [(1, 2)]
    assert check.message.startswith("sdpa vs eager: sequence 1 output 2 differs")
    same = checks.check_agreement("implementations",
                                  [("x", make_run(layout, ref), make_run(layout, ref))],
                                  code="MC076", tolerance=1e-4, errors=[], what="agree")
    assert same.status == "pass" and same.message == "agree" and same.max_diff == 0.0


def test_agreement_check_reports_errors_when_nothing_ran() -> None:
    check = checks.check_agreement("packed", [], code="MC076", tolerance=1e-4,
                                   errors=["ValueError: no"], what="agree")
    assert check.status == "error" and "ValueError: no" in check.message


def test_unpack_lines_packed_tokens_up_with_the_padded_rows() -> None:
    layout = Layout((0, 1), (3, 1), 3, "left")
    base = make_run(layout, torch.zeros(2, 3, 1))
    packed = torch.tensor([[[10.0], [11.0], [12.0], [20.0]]])
    run = unpack(packed, base)
    assert run.layout.side == "right"
    assert run.out is not None
    assert run.out[0, :, 0].tolist() == [10.0, 11.0, 12.0]
    assert run.out[1, 0, 0] == 20.0 and math.isnan(float(run.out[1, 1, 0]))


def test_finite_check_lists_each_output_once() -> None:
    found = [("length 1", 0, 0), ("length 1", 0, 0), ("left-padded batch", 2, 5)]
    check = checks.check_finite(found, [], tolerance=1e-4)
    assert check.status == "fail" and check.count == 2
    assert check.where == [(0, 0), (2, 5)]
    assert check.message.startswith("length 1: sequence 0 real output 0 is NaN/inf")
