"""The summary must not depend on the block size: chunked == whole-tensor, always."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from maskcheck.analysis.pipeline import report_from_summary
from maskcheck.analysis.summary import MaskSummary, summarize
from maskcheck.io.base import ArraySource

F32_MIN = float(np.finfo(np.float32).min)


def _as_tuple(s: MaskSummary) -> tuple[object, ...]:
    return (
        s.nan_count, s.posinf_count, s.neginf_count, s.finfo_min_count, s.nonzero_count,
        s.min_value, s.max_value, sorted(s.distinct.items()), s.distinct_overflow,
        s.nz_count.tolist(), s.first_nz.tolist(), s.last_nz.tolist(), s.first_z.tolist(),
        s.last_z.tolist(), s.col_any_nz.tolist(), s.col_all_nz.tolist(),
        s.matrix_crc.tolist(), s.preview_nz.tolist(), s.nan_where[:1],
    )


shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=7)
mask_values = st.sampled_from([0.0, -np.inf, F32_MIN, 1.0, np.nan, -1e9])


@st.composite
def masks(draw: st.DrawFn) -> np.ndarray:
    shape = draw(shapes)
    kind = draw(st.sampled_from(["bool", "int", "float"]))
    if kind == "bool":
        return draw(hnp.arrays(np.bool_, shape))
    if kind == "int":
        return draw(hnp.arrays(np.int64, shape, elements=st.integers(0, 1)))
    return draw(hnp.arrays(np.float32, shape, elements=mask_values))


@settings(max_examples=150, deadline=None)
@given(masks(), st.integers(1, 9))
def test_block_size_does_not_change_the_summary(mask: np.ndarray, block_rows: int) -> None:
    source = ArraySource("m", mask)
    whole = summarize(source)
    chunked = summarize(source, block_rows=block_rows)
    assert _as_tuple(chunked) == _as_tuple(whole)
    a = report_from_summary(whole)
    b = report_from_summary(chunked)
    assert (a.convention, a.pattern, [f.to_json() for f in a.findings]) == (
        b.convention, b.pattern, [f.to_json() for f in b.findings])


def test_rows_record_first_and_last_nonzero() -> None:
    m = np.array([[0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]], np.float32)
    s = summarize(ArraySource("m", m), block_rows=2)
    assert s.nz_count.tolist() == [2, 0, 4]
    assert s.first_nz.tolist() == [1, -1, 0]
    assert s.last_nz.tolist() == [2, -1, 3]
    assert s.first_z.tolist() == [0, 0, -1]
    assert s.last_z.tolist() == [3, 3, -1]


def test_values_are_counted_exactly() -> None:
    m = np.array([[0, -np.inf, F32_MIN, np.nan]], np.float32)
    s = summarize(ArraySource("m", m))
    assert (s.nan_count, s.neginf_count, s.finfo_min_count) == (1, 1, 1)
    assert s.distinct == {0.0: 1, -np.inf: 1, F32_MIN: 1}
    assert s.nan_where == [(0, 3)]


def test_many_distinct_values_overflow_the_bounded_set() -> None:
    rng = np.random.default_rng(0)
    s = summarize(ArraySource("w", rng.standard_normal((16, 64)).astype(np.float32)),
                  block_rows=4)
    assert s.distinct_overflow
    assert len(s.distinct) <= 64


def test_identical_matrices_share_a_checksum() -> None:
    m = np.broadcast_to(np.tril(np.ones((4, 4), bool)), (3, 4, 4)).copy()
    m[2, 0, 3] = True
    s = summarize(ArraySource("m", m), block_rows=3)
    assert s.matrix_crc[0] == s.matrix_crc[1] != s.matrix_crc[2]
