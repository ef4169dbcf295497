"""The summary must not depend on the block size: chunked == whole-tensor, always."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from maskcheck.analysis.pipeline import report_from_summary
from maskcheck.analysis.summary import BLOCK_BYTES, MaskSummary, default_block_rows, summarize
from maskcheck.conventions import FINFO_MIN
from maskcheck.io.base import ArraySource

F32_MIN = float(np.finfo(np.float32).min)


def _as_tuple(s: MaskSummary) -> tuple[object, ...]:
    split = None if s.split is None else _rows_tuple(s.split)
    return (*_rows_tuple(s), np.nan_to_num(s.diag_value, nan=7.5).tolist(), s.strong_count,
            split)


def _rows_tuple(s: MaskSummary) -> tuple[object, ...]:
    return (
        s.nan_count, s.posinf_count, s.neginf_count, s.finfo_min_count, s.nonzero_count,
        s.min_value, s.max_value, sorted(s.distinct.items()), s.distinct_overflow,
        s.nz_count.tolist(), s.first_nz.tolist(), s.last_nz.tolist(), s.first_z.tolist(),
        s.last_z.tolist(), s.col_any_nz.tolist(), s.col_all_nz.tolist(),
        s.matrix_crc.tolist(), s.preview_nz.tolist(), s.nan_where[:1],
    )


shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=7)
mask_values = st.sampled_from([0.0, -np.inf, F32_MIN, 1.0, np.nan, -1e9, -0.25, 2.0])


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


# ------------------------------------------------------------------------------------------
# The fast paths (bit patterns, packed flags) against a plain whole-tensor reference.

BF16_MIN = FINFO_MIN["bfloat16"]
SPECIAL = [0.0, -0.0, 1.0, -1.0, -1e9, np.inf, -np.inf, np.nan, 0.5]
FLOAT_DTYPES: dict[str, type[np.floating[Any]]] = {
    "float16": np.float16, "float32": np.float32, "float64": np.float64, "bfloat16": np.float32,
}


def _bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (truncate) and widen back, as the loaders do."""
    return (a.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def _zero_normal(v: float) -> tuple[float, float]:
    return v, math.copysign(1.0, v)


def _first_last(flags: np.ndarray) -> tuple[list[int], list[int]]:
    any_ = flags.any(axis=1)
    first = np.where(any_, flags.argmax(axis=1), -1)
    last = np.where(any_, flags.shape[1] - 1 - flags[:, ::-1].argmax(axis=1), -1)
    return first.tolist(), last.tolist()


def _reference(a: np.ndarray, dtype: str) -> dict[str, object]:
    """Every field of the summary, by definition, on the whole tensor at once."""
    shape = a.shape
    cols = shape[-1] if shape else 1
    flat = a.reshape(-1, cols)
    L = shape[-2] if len(shape) >= 2 else 1
    nz = flat.astype(bool) if flat.dtype == np.bool_ else flat != 0  # NaN != 0; -0.0 == 0
    out: dict[str, object] = {"nz_count": nz.sum(axis=1).tolist()}
    out["first_nz"], out["last_nz"] = _first_last(nz)
    out["first_z"], out["last_z"] = _first_last(~nz)
    by_matrix = nz.reshape(-1, L, cols)
    out["col_any_nz"] = by_matrix.any(axis=1).tolist()
    out["col_all_nz"] = by_matrix.all(axis=1).tolist()
    out["nonzero_count"] = int(nz.sum())
    out["preview_nz"] = _reference_preview(by_matrix[0])
    values = flat.astype(np.float64) + 0.0  # + 0.0: -0.0 is zero
    nan = np.isnan(values)
    valid = values[~nan]
    out["nan_count"] = int(nan.sum())
    out["posinf_count"] = int(np.sum(valid == np.inf))
    out["neginf_count"] = int(np.sum(valid == -np.inf))
    r, c = np.nonzero(nan)
    out["nan_where"] = list(zip(r.tolist(), c.tolist(), strict=True))[:20]
    out["neginf_rows"] = np.flatnonzero((values == -np.inf).any(axis=1)).tolist()[:20]
    fmin = FINFO_MIN.get(dtype)
    hit = values == fmin if fmin is not None else np.zeros_like(nan)
    out["finfo_min_count"] = int(hit.sum())
    out["finfo_min_rows"] = np.flatnonzero(hit.any(axis=1)).tolist()[:20]
    if valid.size:
        out["min_value"] = _zero_normal(float(valid.min()))
        out["max_value"] = _zero_normal(float(valid.max()))
    uniq, counts = np.unique(valid, return_counts=True)
    out["distinct_overflow"] = bool(uniq.size > 64)
    if uniq.size <= 64:
        out["distinct"] = sorted(zip(uniq.tolist(), counts.tolist(), strict=True))
    return out


def _reference_preview(m: np.ndarray) -> list[list[float]]:
    L, S = m.shape
    cr, cc = -(-L // 64), -(-S // 128)
    return [[float(m[i:i + cr, j:j + cc].mean()) for j in range(0, S, cc)]
            for i in range(0, L, cr)]


def _observed(s: MaskSummary) -> dict[str, object]:
    out: dict[str, object] = {
        k: getattr(s, k).tolist()
        for k in ("nz_count", "first_nz", "last_nz", "first_z", "last_z", "col_any_nz",
                  "col_all_nz", "preview_nz")
    }
    for k in ("nonzero_count", "nan_count", "posinf_count", "neginf_count", "finfo_min_count",
              "distinct_overflow", "nan_where", "neginf_rows", "finfo_min_rows"):
        out[k] = getattr(s, k)
    if math.isfinite(s.min_value) or s.nan_count < s.size:
        out["min_value"] = _zero_normal(s.min_value)
        out["max_value"] = _zero_normal(s.max_value)
    if not s.distinct_overflow:
        out["distinct"] = sorted(s.distinct.items())
    return out


def _crc_classes(s: MaskSummary, a: np.ndarray) -> None:
    """Equal matrices <=> equal checksums."""
    mats = a.reshape(s.matrices, -1)
    for i in range(s.matrices):
        for j in range(i):
            same = bool(np.array_equal(mats[i].view(np.uint8), mats[j].view(np.uint8)))
            assert same == (s.matrix_crc[i] == s.matrix_crc[j]), (i, j)


@st.composite
def typed_masks(draw: st.DrawFn) -> tuple[np.ndarray, str]:
    dims = draw(st.integers(1, 4))
    lead = draw(st.lists(st.integers(1, 3), min_size=dims - 1, max_size=dims - 1))
    cols = draw(st.sampled_from([1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 130]))
    shape = (*lead, cols)
    dtype = draw(st.sampled_from(
        ["bool", "uint8", "int64", "float16", "float32", "float64", "bfloat16"]))
    if dtype == "bool":
        return draw(hnp.arrays(np.bool_, shape)), dtype
    if dtype in ("uint8", "int64"):
        ints = [0, 1, 255] if dtype == "uint8" else [0, 1, -1, 7, 2**40]
        picked = draw(st.lists(st.sampled_from(ints), min_size=1, max_size=5, unique=True))
        return draw(hnp.arrays(np.dtype(dtype), shape, elements=st.sampled_from(picked))), dtype
    np_type = FLOAT_DTYPES[dtype]
    floats = [*SPECIAL, FINFO_MIN[dtype]]
    values = draw(st.lists(st.sampled_from(floats), min_size=1, max_size=6, unique_by=repr))
    with np.errstate(over="ignore"):
        choices = np.array(values, np.float64).astype(np_type)
    idx = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, len(values) - 1)))
    a = choices[idx]
    return (_bf16(a) if dtype == "bfloat16" else a), dtype


@settings(max_examples=300, deadline=None)
@given(typed_masks(), st.integers(1, 9))
def test_every_dtype_matches_the_whole_tensor_reference(
    case: tuple[np.ndarray, str], block_rows: int
) -> None:
    a, dtype = case
    source = ArraySource("m", a, dtype)
    chunked = summarize(source, block_rows=block_rows)
    whole = summarize(source)
    assert _as_tuple(chunked) == _as_tuple(whole)
    assert _observed(chunked) == _reference(a, dtype)
    _crc_classes(chunked, a)


@pytest.mark.parametrize("cols", [1024, 1037, 2048, 8150, 8192, 8192 + 5])
@pytest.mark.parametrize("dtype", ["bool", "float16", "bfloat16", "int64"])
def test_wide_rows_take_the_word_paths(cols: int, dtype: str) -> None:
    # Wide rows reach the uint64-word paths and preview cells of whole bytes.
    L = 48
    causal = np.tril(np.ones((L, cols), bool), k=cols - L)
    padded = causal.copy()
    padded[:, -7:] = False
    pieces = np.stack([causal, padded, causal])[:, None]
    if dtype == "bool":
        a = pieces
    elif dtype == "int64":
        a = pieces.astype(np.int64)
    else:
        np_type = FLOAT_DTYPES[dtype]
        a = np.where(pieces, np_type(0), np_type(FINFO_MIN[dtype]) if dtype == "float16"
                     else np_type(-np.inf)).astype(np_type)
        a[2, 0, 5, 3] = np.nan
        if dtype == "bfloat16":
            a = _bf16(a)
    source = ArraySource("m", a, dtype)
    ref = _reference(a, dtype)
    for block_rows in (None, 7, 48, 100):
        s = summarize(source, block_rows=block_rows)
        assert _observed(s) == ref
        _crc_classes(s, a)
    s = summarize(source, block_rows=5)
    assert s.preview_nz.tolist() == summarize(source).preview_nz.tolist()


def test_many_patterns_take_the_general_path_with_the_same_answer() -> None:
    # Six distinct nonzero values per block: more than the bit-pattern path tracks.
    a = np.array([[0, -np.inf, -1e4, 1, 2, 3, 4, np.nan, -0.0]] * 6, np.float16)
    for block_rows in (1, 2, 6):
        assert _observed(summarize(ArraySource("m", a), block_rows)) == _reference(a, "float16")


def test_overflow_keeps_the_mask_values_exact_whatever_the_blocks() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 50)).astype(np.float32)
    a[::3, 7] = -np.inf
    a[::5, 9] = F32_MIN
    a[1, :4] = 0.0
    results = [summarize(ArraySource("w", a), block_rows=b) for b in (1, 3, None)]
    for s in results:
        assert s.distinct_overflow
        assert s.distinct[-np.inf] == 14 and s.distinct[F32_MIN] == 8 and s.distinct[0.0] == 4
    assert len({r.distinct_overflow for r in results}) == 1


def test_progress_reports_rows_done_after_each_block() -> None:
    done: list[int] = []
    summarize(ArraySource("m", np.zeros((2, 5, 3), bool)), block_rows=4, progress=done.append)
    assert done == [4, 8, 10]


def test_rows_longer_than_a_block_still_stream() -> None:
    a = np.zeros((3, 2 * BLOCK_BYTES // 2 + 3), np.float16)
    a[1, -1] = 1.0
    s = summarize(ArraySource("m", a))
    assert default_block_rows(ArraySource("m", a)) == 1
    assert s.nz_count.tolist() == [0, 1, 0]
    assert s.last_nz.tolist() == [-1, a.shape[1] - 1, -1]


def test_without_numpy_bitwise_count_the_table_gives_the_same_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # numpy < 2.0 has no np.bitwise_count; the 256-entry popcount table stands in.
    a = np.tril(np.ones((2, 40, 8150), bool), k=8000)
    a[1, :, -3:] = False
    expected = _as_tuple(summarize(ArraySource("m", a), block_rows=7))
    if hasattr(np, "bitwise_count"):
        monkeypatch.delattr(np, "bitwise_count")
    assert _as_tuple(summarize(ArraySource("m", a), block_rows=7)) == expected
    assert _observed(summarize(ArraySource("m", a))) == _reference(a, "bool")


def test_checksums_of_big_blocks_match_the_crc_of_each_matrix() -> None:
    # Over BLOCK_BYTES: the CRC runs on the helper thread, chained across blocks.
    import zlib

    base = np.where(np.tri(2048, 4096, dtype=bool), np.float16(0), np.float16(-np.inf))
    other = base.copy()
    other[2047, 0] = np.float16(-65504.0)
    a = np.stack([base, other, base])[:, None]
    for block_rows in (None, 1000):
        s = summarize(ArraySource("m", a), block_rows=block_rows)
        assert s.matrix_crc.tolist() == [zlib.crc32(m.tobytes()) for m in a.reshape(3, -1)]
    assert s.finfo_min_count == 1 and s.finfo_min_rows == [2047 + 2048]
