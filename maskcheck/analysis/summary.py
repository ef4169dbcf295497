"""The one streaming pass: row blocks of a tensor in, a small MaskSummary out.

No rule scans the tensor. Everything a rule or the inference needs is computed here, block by
block, and merged, so memory stays flat for any size and the result does not depend on the
block size (tests/analysis/test_streaming.py checks that property).

Rows are those of the 2-D view (prod(shape[:-1]), shape[-1]); a "matrix" is one (L, S) slice
of a tensor with >= 2 dims (batch, head, ...), of which there are prod(shape[:-2]).
Per row we record where its *nonzero* elements are. Which of zero/nonzero means "kept" is
the convention's business (conventions.ConventionSpec.nonzero_means), decided later.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from maskcheck.conventions import FINFO_MIN, MAX_DISTINCT, is_bool, is_float
from maskcheck.io.base import TensorSource, element_size, rows_cols

BLOCK_BYTES = 16 * 1024 * 1024
PREVIEW_MAX_ROWS = 64
PREVIEW_MAX_COLS = 128
MAX_SAMPLE = 20
# Above this many leftover values in one block, distinct values are only sampled.
_UNIQUE_SAMPLE = 200_000


@dataclass
class MaskSummary:
    name: str
    shape: tuple[int, ...]
    dtype: str
    rows: int
    cols: int
    matrices: int  # prod(shape[:-2]); 1 for 0-, 1- and 2-D tensors
    matrix_rows: int  # L: rows per matrix
    # Values
    nan_count: int = 0
    posinf_count: int = 0
    neginf_count: int = 0
    finfo_min_count: int = 0
    nonzero_count: int = 0
    min_value: float = math.inf  # over non-NaN elements, inf included
    max_value: float = -math.inf
    distinct: dict[float, int] = field(default_factory=dict)  # non-NaN value -> count
    distinct_overflow: bool = False  # more than MAX_DISTINCT distinct values (then partial)
    nan_where: list[tuple[int, int]] = field(default_factory=list)  # (row, col), sampled
    neginf_rows: list[int] = field(default_factory=list)  # sampled
    finfo_min_rows: list[int] = field(default_factory=list)  # sampled
    # Per row (length `rows`): nonzero count and first/last nonzero and zero column, -1 if none.
    nz_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    first_nz: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last_nz: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    first_z: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last_z: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # Per matrix and key column: nonzero for any row / for every row.
    col_any_nz: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    col_all_nz: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    # CRC32 of each matrix's bytes, to tell identical slices across batch/head.
    matrix_crc: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    # Fraction of nonzero elements per cell of matrix 0, cells of preview_scale elements.
    preview_nz: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    preview_scale: tuple[int, int] = (1, 1)

    @property
    def size(self) -> int:
        return self.rows * self.cols

    @property
    def finfo_min(self) -> float | None:
        return FINFO_MIN.get(self.dtype)

    def row_index(self, row: int) -> tuple[int, ...]:
        """The index tuple (batch, head, ..., query) of a flat row."""
        lead = self.shape[:-1]
        if not lead:
            return (0,)
        return tuple(int(i) for i in np.unravel_index(row, lead))


def default_block_rows(source: TensorSource) -> int:
    _, cols = rows_cols(source.shape)
    return max(1, BLOCK_BYTES // max(1, cols * element_size(source.dtype)))


def summarize(source: TensorSource, block_rows: int | None = None) -> MaskSummary:
    """Read the tensor once, in blocks of `block_rows` rows, and summarise it."""
    rows, cols = rows_cols(source.shape)
    ndim = len(source.shape)
    matrix_rows = source.shape[-2] if ndim >= 2 else 1
    matrices = math.prod(source.shape[:-2]) if ndim >= 2 else 1
    s = MaskSummary(source.name, tuple(source.shape), source.dtype, rows, cols, matrices,
                    matrix_rows)
    s.nz_count = np.zeros(rows, np.int64)
    s.first_nz = np.full(rows, -1, np.int64)
    s.last_nz = np.full(rows, -1, np.int64)
    s.first_z = np.full(rows, -1, np.int64)
    s.last_z = np.full(rows, -1, np.int64)
    s.col_any_nz = np.zeros((matrices, cols), bool)
    s.col_all_nz = np.ones((matrices, cols), bool)
    s.matrix_crc = np.zeros(matrices, np.uint32)
    cell_r = max(1, -(-matrix_rows // PREVIEW_MAX_ROWS))
    cell_c = max(1, -(-cols // PREVIEW_MAX_COLS))
    s.preview_scale = (cell_r, cell_c)
    preview_counts = np.zeros((-(-matrix_rows // cell_r), -(-cols // cell_c)), np.int64)
    if rows == 0 or cols == 0:
        s.preview_nz = preview_counts.astype(float)
        return s
    step = block_rows or default_block_rows(source)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        block = source.read_rows(start, stop)
        if block.shape != (stop - start, cols):
            raise ValueError(f"read_rows returned {block.shape}, expected {(stop - start, cols)}")
        _values(s, block, start)
        nz = block if block.dtype == np.bool_ else block != 0
        _rows(s, nz, start)
        _matrices(s, block, nz, start, preview_counts)
    s.preview_nz = _preview_fraction(preview_counts, matrix_rows, cols, cell_r, cell_c)
    return s


def _values(s: MaskSummary, block: np.ndarray, start: int) -> None:
    if is_bool(s.dtype):
        trues = int(np.count_nonzero(block))
        s.nonzero_count += trues
        _add_distinct(s, {1.0: trues, 0.0: block.size - trues})
        if trues:
            s.max_value = max(s.max_value, 1.0)
        if trues < block.size:
            s.min_value = min(s.min_value, 0.0)
        else:
            s.min_value = min(s.min_value, 1.0)
        if not trues:
            s.max_value = max(s.max_value, 0.0)
        return
    data = block
    nonzero = int(np.count_nonzero(data))
    s.nonzero_count += nonzero
    nan_mask = None
    if is_float(s.dtype):
        nan_mask = np.isnan(data)
        nan = int(np.count_nonzero(nan_mask))
        if nan:
            s.nan_count += nan
            if len(s.nan_where) < MAX_SAMPLE:
                r, c = np.nonzero(nan_mask)
                for rr, cc in zip(r[: MAX_SAMPLE], c[: MAX_SAMPLE], strict=True):
                    if len(s.nan_where) < MAX_SAMPLE:
                        s.nan_where.append((start + int(rr), int(cc)))
            valid = data[~nan_mask]
            if valid.size == 0:
                return
        else:
            valid = data
            nan_mask = None
    else:
        valid = data
    lo = float(valid.min())
    hi = float(valid.max())
    s.min_value = min(s.min_value, lo)
    s.max_value = max(s.max_value, hi)
    counts: dict[float, int] = {}
    known = 0
    # NaN counts as nonzero, so count zeros on the valid values only when NaN is present.
    zeros = valid.size - (nonzero if nan_mask is None else int(np.count_nonzero(valid)))
    if zeros:
        counts[0.0] = zeros
        known += zeros
    for v in {lo, hi} - {0.0}:
        c = int(np.count_nonzero(valid == v))
        counts[v] = c
        known += c
    if is_float(s.dtype):
        fmin = FINFO_MIN.get(s.dtype)
        if lo == -math.inf:
            s.neginf_count += counts.get(-math.inf, 0)
            _sample_rows(s.neginf_rows, block == -np.inf, start)
        if hi == math.inf:
            s.posinf_count += counts.get(math.inf, 0)
        if fmin is not None and lo <= fmin:
            hit = block == np.float32(fmin) if block.dtype != np.float64 else block == fmin
            c = int(np.count_nonzero(hit))
            if c:
                s.finfo_min_count += c
                _sample_rows(s.finfo_min_rows, hit, start)
                if fmin not in counts:
                    counts[fmin] = c
                    known += c
    if known < valid.size:
        rest = valid[(valid != 0) & (valid != lo) & (valid != hi)]
        if s.finfo_min_count and is_float(s.dtype):
            fmin = FINFO_MIN[s.dtype]
            rest = rest[rest != fmin]
        if rest.size > _UNIQUE_SAMPLE:
            s.distinct_overflow = True
            rest = rest[:_UNIQUE_SAMPLE]
        uniq, ucount = np.unique(rest, return_counts=True)
        if uniq.size > MAX_DISTINCT:
            s.distinct_overflow = True
            uniq, ucount = uniq[:MAX_DISTINCT], ucount[:MAX_DISTINCT]
        for v, c in zip(uniq.tolist(), ucount.tolist(), strict=True):
            counts[float(v)] = counts.get(float(v), 0) + int(c)
    _add_distinct(s, counts)


def _add_distinct(s: MaskSummary, counts: dict[float, int]) -> None:
    for v, c in counts.items():
        if c <= 0:
            continue
        if v in s.distinct:
            s.distinct[v] += c
        elif len(s.distinct) < MAX_DISTINCT:
            s.distinct[v] = c
        else:
            s.distinct_overflow = True


def _sample_rows(store: list[int], hit: np.ndarray, start: int) -> None:
    if len(store) >= MAX_SAMPLE:
        return
    rows = np.flatnonzero(hit.any(axis=1))
    for r in rows[: MAX_SAMPLE - len(store)]:
        store.append(start + int(r))


def _first_last(flags: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cols = flags.shape[1]
    first = np.where(present, flags.argmax(axis=1), -1)
    last = np.where(present, cols - 1 - flags[:, ::-1].argmax(axis=1), -1)
    return first, last


def _rows(s: MaskSummary, nz: np.ndarray, start: int) -> None:
    stop = start + nz.shape[0]
    count = np.count_nonzero(nz, axis=1)
    s.nz_count[start:stop] = count
    f, la = _first_last(nz, count > 0)
    s.first_nz[start:stop] = f
    s.last_nz[start:stop] = la
    has_zero = count < nz.shape[1]
    if has_zero.any():
        f, la = _first_last(~nz, has_zero)
        s.first_z[start:stop] = f
        s.last_z[start:stop] = la


def _matrices(
    s: MaskSummary, block: np.ndarray, nz: np.ndarray, start: int, preview: np.ndarray
) -> None:
    L = s.matrix_rows
    row = start
    stop = start + block.shape[0]
    cell_r, cell_c = s.preview_scale
    while row < stop:
        m = row // L
        seg_stop = min(stop, (m + 1) * L)
        a, b = row - start, seg_stop - start
        part = nz[a:b]
        s.col_any_nz[m] |= part.any(axis=0)
        s.col_all_nz[m] &= part.all(axis=0)
        raw = np.ascontiguousarray(block[a:b])
        s.matrix_crc[m] = zlib.crc32(memoryview(raw).cast("B"), int(s.matrix_crc[m]))
        if m == 0:
            padded_cols = preview.shape[1] * cell_c
            counts = part
            if padded_cols != part.shape[1]:
                counts = np.zeros((part.shape[0], padded_cols), bool)
                counts[:, : part.shape[1]] = part
            per_cell = counts.reshape(part.shape[0], preview.shape[1], cell_c).sum(axis=2)
            local_rows = np.arange(row, seg_stop) - m * L
            np.add.at(preview, local_rows // cell_r, per_cell)
        row = seg_stop


def _preview_fraction(counts: np.ndarray, L: int, S: int, cell_r: int, cell_c: int) -> np.ndarray:
    rows_in = np.minimum(cell_r, L - np.arange(counts.shape[0]) * cell_r)
    cols_in = np.minimum(cell_c, S - np.arange(counts.shape[1]) * cell_c)
    area = np.outer(rows_in, cols_in).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(area > 0, counts / np.maximum(area, 1), 0.0)
    return out
