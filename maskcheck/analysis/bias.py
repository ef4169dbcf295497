"""What the bias of a biased float mask looks like: ALiBi slopes or a relative-position table.

Read on a few (L, S) matrices of the tensor, kept positions only (masked = at or below
ADDITIVE_MASKED_BELOW). ALiBi adds slope * (j - i) (or slope * j: the same in each row after
the softmax), so along a row the kept values step by one constant; a relative-position bias
(T5, Swin) depends on j - i only, so it is constant along each diagonal.
"""

from __future__ import annotations

import numpy as np

from maskcheck.conventions import ADDITIVE_MASKED_BELOW

# Looked at: at most this many matrices, each at most this many elements.
MAX_MATRICES = 8
MAX_MATRIX_ELEMENTS = 1 << 20
_TOL = 1e-2  # relative: float16/bfloat16 biases are rounded


def bias_look(matrices: np.ndarray) -> str:
    """'alibi', 'relative-position' or 'none' for float matrices (M, L, S)."""
    values = matrices.astype(np.float64)
    kept = values > ADDITIVE_MASKED_BELOW
    if not kept.any():
        return "none"
    if all(_linear_rows(v, k) for v, k in zip(values, kept, strict=True)) and _varies(values, kept):
        return "alibi"
    if all(_toeplitz(v, k) for v, k in zip(values, kept, strict=True)) and _varies(values, kept):
        return "relative-position"
    return "none"


def _close(a: np.ndarray, b: float, scale: float) -> bool:
    return bool(np.all(np.abs(a - b) <= _TOL * max(scale, 1e-6)))


def _varies(values: np.ndarray, kept: np.ndarray) -> bool:
    v = values[kept]
    return bool(v.size and v.max() > v.min())


def _linear_rows(v: np.ndarray, k: np.ndarray) -> bool:
    """Adjacent kept keys of every row differ by one slope (per matrix, i.e. per head)."""
    if not k.any():
        return True  # an all-masked matrix (a padding-only sequence) says nothing
    both = k[:, 1:] & k[:, :-1]
    if not both.any():
        return False
    steps = np.diff(np.where(k, v, 0.0), axis=1)[both]  # masked -inf would give inf - inf
    slope = float(np.median(steps))
    return slope != 0 and _close(steps, slope, abs(slope))


def _toeplitz(v: np.ndarray, k: np.ndarray) -> bool:
    if v.shape[0] < 2:  # one query row: every offset occurs once, nothing to compare
        return False
    if not k.any():
        return True  # an all-masked matrix says nothing
    rows, cols = np.nonzero(k)
    offset = cols - rows
    order = np.argsort(offset, kind="stable")
    off, vals = offset[order], v[rows, cols][order]
    starts = np.flatnonzero(np.diff(off, prepend=off[0] - 1))
    scale = float(np.abs(vals).max()) or 1.0
    first = np.repeat(vals[starts], np.diff(np.append(starts, vals.size)))
    return len(starts) > 1 and _close(vals - first, 0.0, scale)
