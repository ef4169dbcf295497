"""Pattern of one (L, S) matrix from its rows' kept (first, last, count).

A pattern is a core shape (full, causal, sliding window, ...) over a range of valid key
columns [lo, hi]; columns outside it are padding. Each core predicts, for query row i, the
contiguous range of keys it keeps; a matrix matches when every row keeps exactly that range
(rows whose range is empty must keep nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# Cores a correct mask may have, and ones that are always a mistake.
PLAUSIBLE_CORES = ("full", "causal", "causal-lower-right", "sliding-window", "block-diagonal",
                   "prefix-lm")
SUSPECT_CORES = ("anti-causal", "causal-diagonal-masked")


@dataclass
class MatrixPattern:
    core: str  # one of PLAUSIBLE_CORES, SUSPECT_CORES, "empty", "custom"
    pad_left: int = 0
    pad_right: int = 0
    params: dict[str, object] = field(default_factory=dict)
    # Rows the pattern itself leaves with no key (padded queries of a left-padded causal mask).
    expected_empty: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    contiguous: bool = True  # every row's kept keys form one run


Expect = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def classify(
    first: np.ndarray, last: np.ndarray, count: np.ndarray, col_kept: np.ndarray
) -> MatrixPattern:
    """Classify one matrix; arrays are per query row, col_kept per key column."""
    L = first.shape[0]
    S = col_kept.shape[0]
    contiguous = bool(np.all((count == 0) | (last - first + 1 == count)))
    if not count.any():
        return MatrixPattern("empty", expected_empty=np.ones(L, bool))
    kept_cols = np.flatnonzero(col_kept)
    lo, hi = int(kept_cols[0]), int(kept_cols[-1])
    if not contiguous:
        return MatrixPattern("custom", contiguous=False)
    rows = np.arange(L)
    ranges = [(0, S - 1)]
    if (lo, hi) != (0, S - 1):
        ranges.append((lo, hi))
    for plo, phi in ranges:
        cores = _cores(first, last, count, rows, L, S, plo, phi)
        if L == 1:  # one query row (a padding mask, or a decode step): only padding shows
            cores = cores[:1]
        for core, expect, params in cores:
            e_first, e_last = expect(rows)
            e_first = np.maximum(e_first, plo)
            e_last = np.minimum(e_last, phi)
            empty = e_first > e_last
            if np.any(count[empty] != 0):
                continue
            ok = ~empty
            if np.array_equal(first[ok], e_first[ok]) and np.array_equal(last[ok], e_last[ok]):
                return MatrixPattern(core, plo, S - 1 - phi, params, expected_empty=empty)
    block = _block_diagonal(first, last, count, L, S)
    if block is not None:
        return MatrixPattern("block-diagonal", params=block)
    if L == S and (lo, hi) != (0, S - 1):
        # Packed or chunked sequences with padding: blocks over the real square only; pad
        # query rows outside it keep real keys only (col_kept) or nothing.
        sub = slice(lo, hi + 1)
        block = _block_diagonal(first[sub] - lo, last[sub] - lo, count[sub], hi - lo + 1,
                                hi - lo + 1)
        if block is not None:
            empty = count == 0
            return MatrixPattern("block-diagonal", lo, S - 1 - hi, block, expected_empty=empty)
    parts = _bidirectional_blocks(first, last, count, lo, hi) if L == S else None
    if parts is not None:
        return MatrixPattern("custom", lo, S - 1 - hi, parts, expected_empty=count == 0)
    return MatrixPattern("custom")


def _cores(
    first: np.ndarray, last: np.ndarray, count: np.ndarray, rows: np.ndarray,
    L: int, S: int, plo: int, phi: int,
) -> list[tuple[str, Expect, dict[str, object]]]:
    d = S - L
    lo_arr = np.full(L, plo)
    hi_arr = np.full(L, phi)
    out: list[tuple[str, Expect, dict[str, object]]] = [
        ("full", lambda r: (lo_arr, hi_arr), {}),
        ("causal", lambda r: (lo_arr, r), {}),
    ]
    if d != 0:
        out.append(("causal-lower-right", lambda r: (lo_arr, r + d), {}))
    out.append(("anti-causal", lambda r: (r, hi_arr), {}))
    out.append(("causal-diagonal-masked", lambda r: (lo_arr, r - 1), {}))
    prefix = _prefix_end(first, last, count, rows, plo)
    if prefix is not None:
        out.append(("prefix-lm", lambda r: (lo_arr, np.maximum(r, prefix)),
                    {"prefix": prefix + 1}))
    for off in (0, d) if d != 0 else (0,):
        window = _window(first, last, count, rows, off, plo, phi)
        if window is not None:
            a, b = window
            out.append((
                "sliding-window",
                _window_expect(a, b, off),
                {"window": a + b + 1, "window_back": a, "window_forward": b,
                 "aligned": "lower-right" if off else "upper-left"},
            ))
    return out


def _prefix_end(
    first: np.ndarray, last: np.ndarray, count: np.ndarray, rows: np.ndarray, plo: int
) -> int | None:
    """Prefix-LM (PaliGemma): the first real query keeps a bidirectional prefix [plo, end];
    its end, if the first real row sees beyond itself and later rows are causal."""
    has = np.flatnonzero(count > 0)
    if has.size < 2:
        return None
    r0 = int(has[0])
    end = int(last[r0])
    if end <= r0 or end >= int(rows[-1]):
        return None
    return end


def _window_expect(a: int, b: int, off: int) -> Expect:
    def expect(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return r + off - a, r + off + b

    return expect


def _window(
    first: np.ndarray, last: np.ndarray, count: np.ndarray, rows: np.ndarray,
    off: int, plo: int, phi: int,
) -> tuple[int, int] | None:
    has = count > 0
    if not has.any():
        return None
    centre = rows + off
    # Rows clipped by padding (a window past the last real key) keep less on one side; the
    # widest row on each side gives the window, and classify() checks every row against it.
    back = centre[has] - first[has]
    fwd = last[has] - centre[has]
    a, b = int(back.max()), int(fwd.max())
    if b < 0:
        return None
    if a < 1:  # a window that looks only ahead is anti-causal, not a sliding window
        return None
    # A window must actually cut something off; otherwise it is causal or full.
    cuts_left = bool(np.any(centre - a > plo))
    cuts_right = b > 0 and bool(np.any(centre + b < phi))
    if not cuts_left and not (cuts_right and b < phi - plo):
        return None
    if not cuts_left and b == 0:
        return None
    return a, b


def _block_diagonal(
    first: np.ndarray, last: np.ndarray, count: np.ndarray, L: int, S: int
) -> dict[str, object] | None:
    if L != S or L < 2 or np.any(count == 0):
        return None
    sizes: list[int] = []
    causal_within = True
    i = 0
    while i < L:
        start = int(first[i])
        if start != i:
            return None
        end = int(last[i])
        block_end = end
        # Causal within the block: last == row; full block: last == block end.
        if end == i and i + 1 < L and int(first[i + 1]) == start:
            j = i
            while j < L and int(first[j]) == start:
                if int(last[j]) != j:
                    return None
                j += 1
            block_end = j - 1
        else:
            if end > i:  # a one-row block is causal and full alike
                causal_within = False
            if end < i:
                return None
            for j in range(i, end + 1):
                if int(first[j]) != start or int(last[j]) != end:
                    return None
        sizes.append(block_end - start + 1)
        i = block_end + 1
    if len(sizes) < 2:
        return None
    params: dict[str, object] = {"blocks": len(sizes)}
    if len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0]:
        params["block"] = sizes[0]
    else:
        params["block_sizes"] = sizes[:20]
    if causal_within:
        params["causal_within_blocks"] = True
    return params


def _bidirectional_blocks(
    first: np.ndarray, last: np.ndarray, count: np.ndarray, lo: int, hi: int
) -> dict[str, object] | None:
    """Causal with bidirectional blocks (image tokens of Gemma3 / PaliGemma-style models): every
    real row keeps [lo, max(row, end of its block)]; the blocks, if that is the shape."""
    has = np.flatnonzero(count > 0)
    has = has[has <= hi]  # right-padding pad queries keep real keys only
    if has.size < 2 or np.any(first[has] != lo):
        return None
    ends = last[has]
    if np.any(ends < has) or np.any(ends > hi):
        return None
    blocks: list[list[int]] = []
    causal_rows = 0
    i = 0
    while i < has.size:
        r, e = int(has[i]), int(ends[i])
        if e == r:
            causal_rows += 1
            i += 1
            continue
        j = i
        while j < has.size and int(has[j]) <= e:
            if int(ends[j]) != e:
                return None
            j += 1
        blocks.append([r, e])
        i = j
    if not blocks or not causal_rows:  # no causal row: a padded full mask, not blocks
        return None
    return {"causal": True, "bidirectional_blocks": blocks[:20]}
