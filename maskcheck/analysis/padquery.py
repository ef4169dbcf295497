"""Which query rows are padding: the one place that decides it.

An empty row (a query with no key to attend) is a bug for a real token and expected for a
pad token, whose output every library discards (HF left padding, sliding windows past the
last real token, ModernBERT's local window). Evidence, any of which suffices:

- the mask itself, when each query has a key of its own (self-attention, S >= L, query i at
  key i + S - L): a query whose own key is hidden and that no query may attend is a pad
  position. A matrix in which no query keeps its own key has no real query to compare with,
  so the mask alone then calls nothing padding (an all-padding sequence stays an error);
- a companion padding mask of the same call or file (key padding mask, HF attention_mask):
  query i of batch element b is padding where key i + S - L of b is.

`pad_query_rows` works on a plain bool "may attend" array (the runtime guard and replay
use it); `pad_queries_from_summary` reads the same facts from a streamed summary.
"""

from __future__ import annotations

import numpy as np


def pad_query_rows(kept: np.ndarray, real_keys: np.ndarray | None = None) -> np.ndarray:
    """Pad query positions of an attention mask, shape kept.shape[:-1].

    `kept`: bool, (..., L, S), True = the query may attend the key (convert the convention
    first). `real_keys`: optional bool (N, S), True = real token (an HF attention_mask
    ``.bool()``, or ``~key_padding_mask``); it is matched to kept's first dim (N, or N*H for
    a 3-D mask) and ignored when it cannot be.
    """
    kept = np.asarray(kept, bool)
    if kept.ndim < 2:
        return np.zeros(kept.shape[:-1], bool)
    L, S = kept.shape[-2:]
    flat = kept.reshape(-1, L, S)
    diag = _own_key_kept(flat)
    col_any = np.asarray(flat.any(axis=1))
    pad: np.ndarray = np.zeros((flat.shape[0], L), bool)
    for m in range(flat.shape[0]):
        pad[m] = _pad_from_mask(None if diag is None else diag[m], col_any[m], L, S)
    pad = pad.reshape(kept.shape[:-1])
    if real_keys is not None:
        from_keys = _pad_from_companion(kept.shape, np.asarray(real_keys, bool))
        if from_keys is not None:
            pad = pad | from_keys
    return pad


def _own_key_kept(flat: np.ndarray) -> np.ndarray | None:
    _, L, S = flat.shape
    if S < L:
        return None
    rows = np.arange(L)
    out: np.ndarray = flat[:, rows, rows + S - L]
    return out


def _pad_from_mask(
    own_kept: np.ndarray | None, col_kept: np.ndarray, L: int, S: int
) -> np.ndarray:
    """One matrix: own_kept (L,) or None, col_kept (S,) = some query may attend the key."""
    if own_kept is None or not own_kept.any():
        return np.zeros(L, bool)
    out: np.ndarray = ~own_kept & ~col_kept[np.arange(L) + S - L]
    return out


def _pad_from_companion(shape: tuple[int, ...], real_keys: np.ndarray) -> np.ndarray | None:
    """Pad queries (shape[:-1]) from an (N, S) real-token mask, when it maps to the batch."""
    L, S = shape[-2:]
    if real_keys.ndim != 2 or real_keys.shape[1] != S or S < L or len(shape) < 3:
        return None
    n = real_keys.shape[0]
    lead = shape[:-2]
    if lead[0] % n:
        return None
    per = lead[0] // n  # 1, or the heads of an (N*H, L, S) mask
    q_real = real_keys[:, S - L:]  # (N, L)
    pad = np.repeat(~q_real, per, axis=0)  # (lead[0], L)
    pad = pad.reshape((lead[0],) + (1,) * (len(lead) - 1) + (L,))
    out: np.ndarray = np.broadcast_to(pad, shape[:-1]).copy()
    return out


def pad_queries_from_summary(
    own_kept: np.ndarray | None, col_kept: np.ndarray, matrices: int, L: int, S: int,
    shape: tuple[int, ...], real_keys: np.ndarray | None = None,
) -> np.ndarray:
    """Per flat row (matrices * L): the same verdict from a summary's per-row own-key flags
    (NaN-free bool, or None when S < L) and per-matrix kept columns (matrices, S)."""
    out = np.zeros(matrices * L, bool)
    if L < 2 and real_keys is None:
        return out
    for m in range(matrices):
        own = None if own_kept is None else own_kept[m * L:(m + 1) * L]
        out[m * L:(m + 1) * L] = _pad_from_mask(own, col_kept[m], L, S)
    if real_keys is not None and len(shape) >= 3:
        from_keys = _pad_from_companion(shape, np.asarray(real_keys, bool))
        if from_keys is not None:
            out |= from_keys.reshape(-1)
    return out
