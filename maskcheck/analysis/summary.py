"""The one streaming pass: row blocks of a tensor in, a small MaskSummary out.

No rule scans the tensor. Everything a rule or the inference needs is computed here, block by
block, and merged, so memory stays flat for any size and the result does not depend on the
block size (tests/analysis/test_streaming.py checks that property).

Rows are those of the 2-D view (prod(shape[:-1]), shape[-1]); a "matrix" is one (L, S) slice
of a tensor with >= 2 dims (batch, head, ...), of which there are prod(shape[:-2]).
Per row we record where its *nonzero* elements are. Which of zero/nonzero means "kept" is
the convention's business (conventions.ConventionSpec.nonzero_means), decided later.

Speed: a block is scanned on its integer bit patterns (compares and max on uint16 are several
times faster than numpy's float16 arithmetic), and a mask block has one or two patterns, so a
few read-only passes tell all its values. Everything per row and per column is then computed
on the nonzero flags packed 8 to a byte (np.packbits), an eighth of the bytes.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from maskcheck.conventions import ADDITIVE_MASKED_BELOW, FINFO_MIN, MAX_DISTINCT, is_float
from maskcheck.io.base import TensorSource, element_size, rows_cols

BLOCK_BYTES = 16 * 1024 * 1024
PREVIEW_MAX_ROWS = 64
PREVIEW_MAX_COLS = 128
MAX_SAMPLE = 20
# Leftover values (beyond 0, min, max, finfo.min) of a block are first uniqued on a sample this
# big; only when the sample shows MAX_DISTINCT values or fewer are all of them uniqued.
_UNIQUE_SAMPLE = 200_000
# A block with more distinct nonzero bit patterns than this takes the general value path.
_FAST_PATTERNS = 4
# Elements of a block looked at first to tell a mask-like block from weights.
_SAMPLE = 4096


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
    # CRC32 of each matrix, to tell identical slices across batch/head: of its bytes, or for
    # bool of its bits packed 8 to a byte along each row (np.packbits), whatever the blocks.
    matrix_crc: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    # Fraction of nonzero elements per cell of matrix 0, cells of preview_scale elements.
    preview_nz: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    preview_scale: tuple[int, int] = (1, 1)
    # Each query row's value at its own key: column i + S - L of row i (the diagonal when
    # L == S, aligned to the last key otherwise); NaN where S < L. Pad queries are decided
    # from it (analysis.padquery).
    diag_value: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Elements at or below ADDITIVE_MASKED_BELOW (-inf included, NaN not).
    strong_count: int = 0
    # A float tensor that holds nonzero values above ADDITIVE_MASKED_BELOW (a bias, kept = +1,
    # Longformer's +finfo.max) also gets its rows summarised on the "strongly masked" flags
    # (value <= ADDITIVE_MASKED_BELOW, or NaN) in place of the nonzero flags: the mask/bias
    # split. None when the two flag sets are the same element for element.
    split: MaskSummary | None = None

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


def summarize(
    source: TensorSource,
    block_rows: int | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> MaskSummary:
    """Read the tensor once, in blocks of `block_rows` rows, and summarise it.

    `progress`, if given, is called with the number of rows done after each block.
    """
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
    s.diag_value = np.full(rows, math.nan)
    cell_r = max(1, -(-matrix_rows // PREVIEW_MAX_ROWS))
    cell_c = max(1, -(-cols // PREVIEW_MAX_COLS))
    s.preview_scale = (cell_r, cell_c)
    preview_counts = np.zeros((-(-matrix_rows // cell_r), -(-cols // cell_c)), np.int64)
    if rows == 0 or cols == 0:
        s.preview_nz = preview_counts.astype(float)
        return s
    step = block_rows or default_block_rows(source)
    big = rows * cols * element_size(source.dtype) > BLOCK_BYTES
    checksums = _Checksums(s, threaded=big and source.dtype != "bool")
    split_preview: np.ndarray | None = None
    try:
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            block = source.read_rows(start, stop)
            if block.shape != (stop - start, cols):
                raise ValueError(
                    f"read_rows returned {block.shape}, expected {(stop - start, cols)}")
            block = np.ascontiguousarray(block)
            if block.dtype == np.bool_:
                packed = np.packbits(block, axis=1)
                checksums.add(packed, start)
                count = _row_popcount(packed)
                _bool_values(s, int(count.sum()), block.size)
                nz = block
            else:
                checksums.add(block, start)
                nz, strong = _values(s, block, start)
                packed = np.packbits(nz, axis=1)
                count = _row_popcount(packed)
                if strong is not None and s.split is None:
                    s.split, split_preview = _start_split(s, preview_counts)
                if s.split is not None and split_preview is not None:
                    if strong is None:  # same flags as nz in this block
                        s_packed, s_count, s_flags = packed, count, nz
                    else:
                        s_flags = strong
                        s_packed = np.packbits(strong, axis=1)
                        s_count = _row_popcount(s_packed)
                    _rows(s.split, s_packed, s_count, start)
                    _matrices(s.split, s_packed, s_flags, start, split_preview)
            _diagonal(s, block, start)
            _rows(s, packed, count, start)
            _matrices(s, packed, nz, start, preview_counts)
            if progress is not None:
                progress(stop)
    finally:
        checksums.close()
    _pin_special_values(s)
    s.preview_nz = _preview_fraction(preview_counts, matrix_rows, cols, cell_r, cell_c)
    if s.split is not None and split_preview is not None:
        s.split.preview_nz = _preview_fraction(split_preview, matrix_rows, cols, cell_r, cell_c)
    return s


def _start_split(s: MaskSummary, preview_counts: np.ndarray) -> tuple[MaskSummary, np.ndarray]:
    """The split summary at the first block whose flags differ: every block before it had
    the same flags on both sets, so the row and column records so far are copied."""
    sp = MaskSummary(s.name, s.shape, s.dtype, s.rows, s.cols, s.matrices, s.matrix_rows)
    sp.nz_count = s.nz_count.copy()
    sp.first_nz = s.first_nz.copy()
    sp.last_nz = s.last_nz.copy()
    sp.first_z = s.first_z.copy()
    sp.last_z = s.last_z.copy()
    sp.col_any_nz = s.col_any_nz.copy()
    sp.col_all_nz = s.col_all_nz.copy()
    sp.preview_scale = s.preview_scale
    return sp, preview_counts.copy()


def _diagonal(s: MaskSummary, block: np.ndarray, start: int) -> None:
    L, S = s.matrix_rows, s.cols
    if S < L:
        return
    rows = np.arange(start, start + block.shape[0])
    cols = rows % L + (S - L)
    s.diag_value[start:start + block.shape[0]] = block[rows - start, cols].astype(np.float64)


# ---------------------------------------------------------------------------------- values

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bool_values(s: MaskSummary, trues: int, size: int) -> None:
    s.nonzero_count += trues
    _add_distinct(s, {1.0: trues, 0.0: size - trues})
    if trues:
        s.max_value = max(s.max_value, 1.0)
    if trues < size:
        s.min_value = min(s.min_value, 0.0)
    else:
        s.min_value = min(s.min_value, 1.0)
    if not trues:
        s.max_value = max(s.max_value, 0.0)


def _values(s: MaskSummary, block: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Account a non-bool block's values; return its nonzero flags (NaN nonzero, -0.0 zero)
    and, for a float block holding nonzero values above ADDITIVE_MASKED_BELOW, its strongly
    masked flags (value <= ADDITIVE_MASKED_BELOW or NaN); None when those equal the nonzero
    flags."""
    bits = block.view(_UINT[block.dtype.itemsize])
    found = _bit_patterns(bits)
    floating = block.dtype.kind == "f"
    if found is None:
        _values_general(s, block, start)
        if floating:
            sign = np.array(1, bits.dtype) << (8 * block.dtype.itemsize - 1)
            flags: np.ndarray = np.not_equal(bits & ~sign, 0)
            wide = block.astype(np.float32) if block.dtype == np.float16 else block
            strong = wide <= ADDITIVE_MASKED_BELOW
            s.strong_count += int(np.count_nonzero(strong))
            other = flags & ~strong
            if s.nan_count:
                other &= ~np.isnan(wide)
            if other.any():
                return flags, strong | (flags & ~(wide > ADDITIVE_MASKED_BELOW))
        else:
            flags = np.not_equal(bits, 0)
        return flags, None
    patterns = np.array([p for p, _, _ in found], bits.dtype).view(block.dtype)
    entries = [(float(v), c, eq) for v, (_, c, eq) in zip(patterns.tolist(), found, strict=True)]
    _values_from_patterns(s, block, entries, start)
    nonzero = [eq for v, _, eq in entries if v != 0]  # NaN != 0 holds: NaN counts as nonzero
    if not nonzero:
        return np.zeros(block.shape, bool), None
    nz: np.ndarray = nonzero[0]
    for eq in nonzero[1:]:
        nz = nz | eq
    if not floating:
        return nz, None
    s.strong_count += sum(c for v, c, _ in entries if v <= ADDITIVE_MASKED_BELOW)
    weak = [v for v, _, _ in entries if v != 0 and v > ADDITIVE_MASKED_BELOW]
    if not weak:
        return nz, None
    masked = [eq for v, _, eq in entries if not v > ADDITIVE_MASKED_BELOW]  # NaN included
    strong_flags = np.zeros(block.shape, bool)
    for eq in masked:
        strong_flags |= eq
    return nz, strong_flags


def _bit_patterns(bits: np.ndarray) -> list[tuple[int, int, np.ndarray]] | None:
    """Every nonzero bit pattern of the block with its count and where it is; None if more
    than _FAST_PATTERNS. Read-only passes (count_nonzero, max) do most of the work."""
    flat = bits.reshape(-1)
    sample = flat[:: max(1, flat.size // _SAMPLE)]
    if np.unique(sample).size > _FAST_PATTERNS + 1:  # weights, ids: not worth trying
        return None
    left = int(np.count_nonzero(bits))
    found: list[tuple[int, int, np.ndarray]] = []
    known: np.ndarray | None = None
    while left:
        if len(found) == _FAST_PATTERNS:
            return None
        top = bits.max() if known is None else bits.max(where=~known, initial=0)
        eq = np.equal(bits, top)
        c = int(np.count_nonzero(eq))
        found.append((int(top), c, eq))
        left -= c
        if left:
            known = eq.copy() if known is None else np.logical_or(known, eq, out=known)
    return found


def _values_from_patterns(
    s: MaskSummary, block: np.ndarray, entries: list[tuple[float, int, np.ndarray]], start: int
) -> None:
    """The exact same accounting as _values_general, from the block's few bit patterns."""
    size = block.size
    zero_bits = size - sum(c for _, c, _ in entries)
    s.nonzero_count += sum(c for v, c, _ in entries if v != 0)
    nans = [(c, eq) for v, c, eq in entries if math.isnan(v)]
    nan = sum(c for c, _ in nans)
    if nan:
        s.nan_count += nan
        if len(s.nan_where) < MAX_SAMPLE:
            where = nans[0][1]
            for _, eq in nans[1:]:
                where = where | eq
            flat = np.flatnonzero(where)[: MAX_SAMPLE - len(s.nan_where)]
            cols = block.shape[1]
            s.nan_where.extend((start + int(i) // cols, int(i) % cols) for i in flat.tolist())
        if nan == size:
            return
    valid: dict[float, int] = {}
    eqs: dict[float, list[np.ndarray]] = {}
    if zero_bits:
        valid[0.0] = zero_bits
    for v, c, eq in entries:
        if math.isnan(v):
            continue
        v = 0.0 if v == 0 else v  # -0.0 is zero
        valid[v] = valid.get(v, 0) + c
        eqs.setdefault(v, []).append(eq)
    lo, hi = min(valid), max(valid)
    s.min_value = min(s.min_value, lo)
    s.max_value = max(s.max_value, hi)
    counts: dict[float, int] = {}
    if valid.get(0.0):
        counts[0.0] = valid[0.0]
    for v in {lo, hi} - {0.0}:
        counts[v] = valid[v]
    if is_float(s.dtype):
        fmin = FINFO_MIN.get(s.dtype)
        if lo == -math.inf:
            s.neginf_count += counts.get(-math.inf, 0)
            _sample_rows(s.neginf_rows, eqs[-math.inf], start)
        if hi == math.inf:
            s.posinf_count += counts.get(math.inf, 0)
        if fmin is not None and lo <= fmin:
            target = float(np.float32(fmin)) if block.dtype != np.float64 else fmin
            c = valid.get(target, 0)
            if c:
                s.finfo_min_count += c
                _sample_rows(s.finfo_min_rows, eqs[target], start)
                if fmin not in counts:
                    counts[fmin] = c
    for v in sorted(set(valid) - set(counts)):
        counts[v] = valid[v]
    _add_distinct(s, counts)


def _values_general(s: MaskSummary, block: np.ndarray, start: int) -> None:
    """Values of a block with many distinct values (weights, biases): numpy on the values."""
    # numpy's float16 arithmetic is emulated and slow; float32 holds every float16 exactly.
    block = block.astype(np.float32) if block.dtype == np.float16 else block
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
                nan_r, nan_c = np.nonzero(nan_mask)
                for rr, cc in zip(nan_r[:MAX_SAMPLE], nan_c[:MAX_SAMPLE], strict=True):
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
    lo = float(valid.min()) + 0.0  # + 0.0: -0.0 is zero
    hi = float(valid.max()) + 0.0
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
        for v, c in _distinct_of(s, rest):
            counts[v] = counts.get(v, 0) + c
    _add_distinct(s, counts)


def _distinct_of(s: MaskSummary, rest: np.ndarray) -> list[tuple[float, int]]:
    # A sample with more than MAX_DISTINCT values proves the overflow; only otherwise is the
    # whole rest sorted, so the counts are exact whenever there is no overflow.
    uniq, ucount = np.unique(rest[:_UNIQUE_SAMPLE], return_counts=True)
    if rest.size > _UNIQUE_SAMPLE and uniq.size <= MAX_DISTINCT:
        uniq, ucount = np.unique(rest, return_counts=True)
    if uniq.size > MAX_DISTINCT:
        s.distinct_overflow = True
        uniq, ucount = uniq[:MAX_DISTINCT], ucount[:MAX_DISTINCT]
    return [(float(v), int(c)) for v, c in zip(uniq.tolist(), ucount.tolist(), strict=True)]


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


def _pin_special_values(s: MaskSummary) -> None:
    """After an overflow the distinct set is partial and depends on the blocks; the values a
    mask is made of are counted exactly anyway, so keep those whatever the block size."""
    if not s.distinct_overflow:
        return
    fmin = s.finfo_min
    exact = [(0.0, s.size - s.nonzero_count), (-math.inf, s.neginf_count),
             (math.inf, s.posinf_count)]
    if fmin is not None:
        exact.append((fmin, s.finfo_min_count))
    for v, c in exact:
        if c:
            s.distinct[v] = c
        else:
            s.distinct.pop(v, None)


def _sample_rows(store: list[int], hit: np.ndarray | list[np.ndarray], start: int) -> None:
    if len(store) >= MAX_SAMPLE:
        return
    if isinstance(hit, list):
        rows_hit = hit[0].any(axis=1)
        for h in hit[1:]:
            rows_hit |= h.any(axis=1)
    else:
        rows_hit = hit.any(axis=1)
    rows = np.flatnonzero(rows_hit)
    for r in rows[: MAX_SAMPLE - len(store)]:
        store.append(start + int(r))


# ------------------------------------------------------------------ rows, on packed flags

def _popcount_table() -> np.ndarray:
    return np.array([bin(b).count("1") for b in range(256)], np.uint8)


_POPCOUNT = _popcount_table()
# For a byte of packbits output (big bit order: element 0 is the top bit): the offset of its
# first and of its last set element.
_FIRST_SET = np.array([8 - b.bit_length() if b else 0 for b in range(256)], np.int64)
_LAST_SET = np.array([8 - (b & -b).bit_length() if b else 0 for b in range(256)], np.int64)


def _popcount(x: np.ndarray) -> np.ndarray:
    """Set bits per element of an unsigned array, same shape."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        out: np.ndarray = np.bitwise_count(x)
        return out
    per_byte = _POPCOUNT[x.view(np.uint8)].reshape(*x.shape, x.dtype.itemsize)
    out = per_byte.sum(axis=-1, dtype=np.uint8)
    return out


def _words(packed: np.ndarray) -> np.ndarray:
    """Packed rows as uint64 where their length allows: 8 times fewer elements to touch."""
    return packed.view(np.uint64) if packed.shape[1] % 8 == 0 else packed


def _row_popcount(packed: np.ndarray) -> np.ndarray:
    counts: np.ndarray = _popcount(_words(packed)).sum(axis=1, dtype=np.int64)
    return counts


def _first_last_set(packed: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, nb = packed.shape
    rows = np.arange(n)
    # argmax on a contiguous bool array stops at the first True (a nonzero byte), so a bool
    # view of the packed bytes finds the first nonzero byte without a compare pass.
    first_byte = packed.view(np.bool_).argmax(axis=1)
    first = first_byte * 8 + _FIRST_SET[packed[rows, first_byte]]
    # On a reversed view argmax does not stop early: reverse a copy, in uint64 words if we can.
    words = _words(packed)
    width = nb // words.shape[1]
    reversed_words = np.ascontiguousarray(words[:, ::-1])
    last_word = words.shape[1] - 1 - reversed_words.view(np.bool_).argmax(axis=1) // width
    if width == 1:
        last_byte = last_word
    else:
        in_word = packed[rows[:, None], last_word[:, None] * width + np.arange(width)]
        last_byte = last_word * width + width - 1 - in_word[:, ::-1].copy().view(
            np.bool_).argmax(axis=1)
    last = last_byte * 8 + _LAST_SET[packed[rows, last_byte]]
    return np.where(present, first, -1), np.where(present, last, -1)


def _rows(s: MaskSummary, packed: np.ndarray, count: np.ndarray, start: int) -> None:
    stop = start + packed.shape[0]
    cols = s.cols
    s.nz_count[start:stop] = count
    first, last = _first_last_set(packed, count > 0)
    s.first_nz[start:stop] = first
    s.last_nz[start:stop] = last
    # A row whose nonzeros form one run has its zeros on either side of it: no scan needed.
    # Mask rows are such runs (causal, window, padding); only the others are scanned.
    run = (count == 0) | (last - first + 1 == count)
    first_z = np.where(count == 0, 0, np.where(first > 0, 0, last + 1))
    last_z = np.where(count == 0, cols - 1, np.where(last < cols - 1, cols - 1, first - 1))
    full = count == cols
    first_z[full] = -1
    last_z[full] = -1
    scattered = np.flatnonzero(~run)
    if scattered.size:
        zeros = np.invert(packed[scattered])
        tail = cols % 8
        if tail:  # packbits pads the last byte with zeros: they are no elements
            zeros[:, -1] &= np.uint8((0xFF << (8 - tail)) & 0xFF)
        f, la = _first_last_set(zeros, np.ones(scattered.size, bool))
        first_z[scattered] = f
        last_z[scattered] = la
    s.first_z[start:stop] = first_z
    s.last_z[start:stop] = last_z


# ---------------------------------------------------------------------------- matrices

class _Checksums:
    """CRC32 per matrix, chained block after block. For blocks of raw bytes the CRC runs on a
    helper thread (zlib releases the GIL) while the main thread scans the block: it is ~40% of
    the work on a float16 mask. One block at a time, so memory stays bounded."""

    def __init__(self, s: MaskSummary, *, threaded: bool) -> None:
        self._s = s
        use_thread = threaded and (os.cpu_count() or 1) > 1
        self._pool = ThreadPoolExecutor(1, "maskcheck-crc") if use_thread else None
        self._pending: Future[None] | None = None

    def add(self, rows: np.ndarray, start: int) -> None:
        if self._pool is None:
            _crc_rows(self._s, rows, start)
            return
        self._wait()
        self._pending = self._pool.submit(_crc_rows, self._s, rows, start)

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def close(self) -> None:
        try:
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def _crc_rows(s: MaskSummary, rows: np.ndarray, start: int) -> None:
    L = s.matrix_rows
    row, stop = start, start + rows.shape[0]
    while row < stop:
        m = row // L
        seg_stop = min(stop, (m + 1) * L)
        chunk = rows[row - start:seg_stop - start]
        s.matrix_crc[m] = zlib.crc32(chunk.data.cast("B"), int(s.matrix_crc[m]))
        row = seg_stop


def _matrices(
    s: MaskSummary, packed: np.ndarray, nz: np.ndarray, start: int, preview: np.ndarray
) -> None:
    L = s.matrix_rows
    row = start
    stop = start + packed.shape[0]
    while row < stop:
        m = row // L
        seg_stop = min(stop, (m + 1) * L)
        a, b = row - start, seg_stop - start
        part = packed[a:b]
        words = _words(part)
        s.col_any_nz[m] |= _unpack(np.bitwise_or.reduce(words, axis=0), s.cols)
        s.col_all_nz[m] &= _unpack(np.bitwise_and.reduce(words, axis=0), s.cols)
        if m == 0:
            _add_preview(s, preview, part, nz[a:b], row)
        row = seg_stop


def _unpack(packed_row: np.ndarray, cols: int) -> np.ndarray:
    return np.unpackbits(packed_row.view(np.uint8), count=cols).view(bool)


def _add_preview(
    s: MaskSummary, preview: np.ndarray, packed: np.ndarray, nz: np.ndarray, row: int
) -> None:
    cell_r, cell_c = s.preview_scale
    n_cells = preview.shape[1]
    k = packed.shape[0]
    if cell_c % 8 == 0:
        width = n_cells * (cell_c // 8)
        if width != packed.shape[1]:
            padded = np.zeros((k, width), np.uint8)
            padded[:, : packed.shape[1]] = packed
            packed = padded
        cell = cell_c // 8
        if cell % 8 == 0:
            packed = packed.view(np.uint64)
            cell //= 8
        per_cell = _popcount(packed).reshape(k, n_cells, cell).sum(axis=2, dtype=np.int64)
    else:
        counts = nz
        if n_cells * cell_c != nz.shape[1]:
            counts = np.zeros((k, n_cells * cell_c), bool)
            counts[:, : nz.shape[1]] = nz
        per_cell = counts.reshape(k, n_cells, cell_c).sum(axis=2, dtype=np.int64)
    cells = np.arange(row, row + k) // cell_r  # rows of matrix 0: local == global
    starts = np.flatnonzero(np.diff(cells, prepend=-1))
    preview[cells[starts]] += np.add.reduceat(per_cell, starts, axis=0)


def _preview_fraction(counts: np.ndarray, L: int, S: int, cell_r: int, cell_c: int) -> np.ndarray:
    rows_in = np.minimum(cell_r, L - np.arange(counts.shape[0]) * cell_r)
    cols_in = np.minimum(cell_c, S - np.arange(counts.shape[1]) * cell_c)
    area = np.outer(rows_in, cols_in).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(area > 0, counts / np.maximum(area, 1), 0.0)
    return out
