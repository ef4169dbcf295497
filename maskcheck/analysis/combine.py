"""Findings that need two tensors of one file: a padding mask and an attention mask together.

nn.MultiheadAttention adds key_padding_mask to attn_mask, so a query row can end up with no
key even when neither mask alone has an empty row (pytorch/pytorch#41508: a banded window
plus right padding).
"""

from __future__ import annotations

import numpy as np

from maskcheck.conventions import CONVENTIONS
from maskcheck.io.base import TensorSource
from maskcheck.model import Finding, Index, Severity, TensorReport
from maskcheck.rules.registry import get_rule

# Combined masks are materialised; beyond this many elements the check is skipped.
MAX_COMBINED = 1 << 24


def _kept(source: TensorSource, report: TensorReport) -> np.ndarray | None:
    means = CONVENTIONS[report.convention].nonzero_means
    if means is None or any(f.code == "MC010" for f in report.findings):
        return None
    rows = int(np.prod(source.shape[:-1])) if len(source.shape) > 1 else 1
    data = source.read_rows(0, rows).reshape(source.shape)
    from maskcheck.analysis.pipeline import nonzero_flags

    nz = nonzero_flags(data, "bias" in report.params)
    return nz if means == "keep" else ~nz


def padding_with_attn_mask(
    sources: list[TensorSource], reports: list[TensorReport]
) -> list[Finding]:
    pads = [(s, r) for s, r in zip(sources, reports, strict=True)
            if r.role == "key_padding_mask" and len(s.shape) == 2]
    attns = [(s, r) for s, r in zip(sources, reports, strict=True)
             if r.role == "attn_mask" and len(s.shape) in (2, 3)]
    out: list[Finding] = []
    info = get_rule("MC002")
    assert info is not None
    for ps, pr in pads:
        for as_, ar in attns:
            n, s_len = ps.shape
            if as_.shape[-1] != s_len or n * int(np.prod(as_.shape)) > MAX_COMBINED:
                continue
            pk, ak = _kept(ps, pr), _kept(as_, ar)
            if pk is None or ak is None:
                continue
            if ak.ndim == 3:
                if ak.shape[0] % n:
                    continue
                heads = ak.shape[0] // n
                ak = ak.reshape(n, heads, *ak.shape[1:])
            else:
                ak = ak[None, None]
            combined = ak & pk[:, None, None, :]
            empty = np.logical_not(np.any(combined, axis=-1))
            pad_empty = np.logical_not(np.any(pk, axis=-1))
            alone = np.logical_not(np.any(ak, axis=-1)) | np.asarray(pad_empty)[:, None, None]
            fresh = empty & ~np.broadcast_to(alone, empty.shape)
            L = ak.shape[2]
            # In self-attention (L == S) a query at a padded position is a pad token: its
            # empty row is expected (info, analysis.padquery); a real token's is an error.
            padded_query = np.zeros_like(fresh)
            if s_len == L:
                padded_query |= ~pk[:, None, :]
            for rows, severity, what in (
                (fresh & ~padded_query, info.severity, "query row(s) of real tokens"),
                (fresh & padded_query, Severity.INFO, "pad query row(s)"),
            ):
                new = np.argwhere(rows)
                if not new.size:
                    continue
                where: list[Index] = [
                    tuple(int(v) for v in (w if ak.shape[1] > 1 else w[[0, 2]]))
                    for w in new[:20]]
                out.append(Finding(
                    "MC002", info.name, severity,
                    f"{ar.name} and {pr.name} together leave {len(new)} {what} with no key to "
                    "attend (each mask alone is fine): MHA adds them, so those rows are NaN on "
                    "the need_weights path (pytorch/pytorch#41508)",
                    tuple(where), "widen the window or keep the diagonal for padded queries",
                    tensor=f"{ar.name}+{pr.name}"))
    return out
