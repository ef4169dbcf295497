"""Call-level findings (MC002 as seen in the output, MC060-MC063) from measured runs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import torch

from maskcheck.attention.call import AttentionCall, sdpa_reference
from maskcheck.attention.paths import TOLERANCE, PathResult, PathsResult
from maskcheck.model import Finding, Index, Severity
from maskcheck.rules.registry import get_rule
from maskcheck.selection import Selection

_MAX_WHERE = 20
_WORDS = {"nan": "NaN", "zero": "zeros", "uniform": "uniform over the hidden keys",
          "attends": "attends as if (partly) unmasked", "wrong": "wrong", "correct": "correct"}


def _finding(code: str, message: str, where: list[Index] | tuple[Index, ...] = (),
             fix: str | None = None) -> Finding:
    rule = get_rule(code)
    assert rule is not None, code
    return Finding(code, rule.name, rule.severity, message, tuple(where)[:_MAX_WHERE],
                   fix or rule.fix or None)


def _kernel_paths(result: PathsResult) -> list[PathResult]:
    return [p for p in result.paths if p.run.path != "reference" and p.run.status != "error"]


def _fmt_rows(rows: list[Index]) -> str:
    shown = ", ".join("(" + ",".join(map(str, r)) + ")" for r in rows[:6])
    return shown + (f" and {len(rows) - 6} more" if len(rows) > 6 else "")


def call_findings(result: PathsResult, selection: Selection | None = None) -> list[Finding]:
    out: list[Finding] = []
    for check in (_empty_rows, _causal_with_mask, _nan_in_masked_inputs, _disagreement,
                  _silent_leak):
        out.extend(check(result))
    if selection is not None:
        out = [f for f in out if selection.allows(f.code)]
    return out


def _outcomes(result: PathsResult, rows: list[Index]) -> dict[str, list[str]]:
    """class -> paths on which the given rows came out that way."""
    by_class: dict[str, list[str]] = defaultdict(list)
    for p in _kernel_paths(result):
        classes = {p.classes.get(r, "?") for r in rows}
        for c in sorted(classes):
            by_class[c].append(p.run.path)
    return by_class


def _empty_rows(result: PathsResult) -> list[Finding]:
    if result.ref is None:
        return []
    empty = result.ref.empty.cpu()
    rows = [tuple(int(x) for x in r) for r in torch.nonzero(empty).tolist()]
    if not rows:
        return []
    pad = _pad_queries(result, tuple(empty.shape))
    unit = "rows (batch, row)" if result.call.api == "mha" else "rows"
    out: list[Finding] = []
    for group, padded in (([r for r in rows if not pad[r]], False),
                          ([r for r in rows if pad[r]], True)):
        if not group:
            continue
        outcomes = _outcomes(result, group)
        said = "; ".join(f"{_WORDS.get(c, c)} on {', '.join(ps)}" for c, ps in outcomes.items())
        what = (f"pad query {unit} (padding positions, outputs discarded) attend to nothing"
                if padded else f"query {unit} have no key to attend")
        f = _finding(
            "MC002",
            f"{len(group)} {what}: {_fmt_rows(group)}. "
            f"What this torch made of them: {said or 'every path refused the call'}.",
            group)
        out.append(replace(f, severity=Severity.INFO) if padded else f)
    return out


def _pad_queries(result: PathsResult, shape: tuple[int, ...]) -> np.ndarray:
    """Pad query positions over the empty-row grid (analysis.padquery, the one verdict)."""
    from maskcheck.analysis.padquery import pad_query_rows

    assert result.ref is not None
    kept = ~result.ref.hidden.cpu().numpy()
    call = result.call
    real = None
    if call.key_padding_mask is not None and call.key_padding_mask.dim() == 2:
        kpm = call.key_padding_mask.detach().cpu()
        real = (~kpm if kpm.dtype == torch.bool else kpm.to(torch.float64) == 0).numpy()
    pad = pad_query_rows(kept, real)
    if pad.shape != shape and pad.ndim == len(shape) + 1:
        pad = np.asarray(pad.all(axis=1))  # MHA: (N, H, L) -> (N, L), a pad position in every head
    if pad.shape != shape:
        return np.zeros(shape, bool)
    return pad


def _causal_with_mask(result: PathsResult) -> list[Finding]:
    call = result.call
    if call.api == "mha" or not call.is_causal or call.attn_mask is None:
        return []
    alternatives = {
        "causal AND mask": result.ref.output.cpu() if result.ref is not None else None,
        "the mask alone": _alt_output(call, is_causal=False, keep_mask=True),
        "the causal triangle alone": _alt_output(call, is_causal=True, keep_mask=False),
    }
    said: list[str] = []
    for p in result.paths:
        if p.run.path == "reference":
            continue
        if p.run.status == "error":
            said.append(f"{p.run.path} raised ({p.run.error})")
            continue
        said.append(f"{p.run.path} ran, result = {_which(p, alternatives, call.dtype)}")
    return [_finding("MC060", "is_causal=True together with an attn_mask: " + "; ".join(said)
                     + ".")]


def _alt_output(call: AttentionCall, *, is_causal: bool, keep_mask: bool) -> torch.Tensor | None:
    kwargs = {**call.kwargs, "is_causal": is_causal}
    alt = replace(call, kwargs=kwargs, attn_mask=call.attn_mask if keep_mask else None)
    try:
        return sdpa_reference(alt).output.cpu()
    except Exception:  # the alternative cannot be built: it is then not an answer
        return None


def _which(p: PathResult, alternatives: dict[str, torch.Tensor | None], dtype: str) -> str:
    assert p.output is not None
    tol = TOLERANCE.get(dtype, 1e-4)
    matches = []
    for label, ref in alternatives.items():
        if ref is None or ref.shape != p.output.shape:
            continue
        both = ~torch.isnan(ref).any(-1) & ~torch.isnan(p.output).any(-1)
        if bool(both.any()):
            scale = max(1.0, float(ref[both].abs().max()))
            if float((ref[both] - p.output[both]).abs().max()) <= tol * scale:
                matches.append(label)
    if not matches:
        return "none of causal AND mask, the mask alone, the causal triangle alone"
    return " = ".join(matches)


def _masked_key_positions(call: AttentionCall, hidden: torch.Tensor) -> torch.Tensor:
    """(…, S) bool: keys hidden from at least one query."""
    return hidden.any(dim=-2)


def _nan_in_masked_inputs(result: PathsResult) -> list[Finding]:
    call, ref = result.call, result.ref
    if ref is None:
        return []
    _, k, v = call.tensors()
    bad_k = ~torch.isfinite(k.detach()).all(-1)
    bad_v = ~torch.isfinite(v.detach()).all(-1)
    if call.api == "mha":
        bad_k, bad_v = bad_k.unsqueeze(1), bad_v.unsqueeze(1)  # (N, 1, S)
    bad = (bad_k | bad_v).cpu()
    hidden_keys = _masked_key_positions(call, ref.hidden.cpu())
    try:
        bad_hidden = bad.expand(hidden_keys.shape) & hidden_keys
    except RuntimeError:
        return []
    if not bool(bad_hidden.any()):
        return []
    finite_ref = ~torch.isnan(ref.output.cpu()).any(-1)
    hit: dict[str, list[Index]] = {}
    for p in _kernel_paths(result):
        rows = [r for r in p.run.nan_rows if bool(finite_ref[r])]
        if rows:
            hit[p.run.path] = rows
    if not hit:
        return []
    positions = [tuple(int(x) for x in r) for r in torch.nonzero(bad_hidden).tolist()]
    rows = sorted({r for rs in hit.values() for r in rs})
    return [_finding(
        "MC061",
        f"key/value hold NaN or inf at masked positions {_fmt_rows(positions)}; rows that never "
        f"attend to them are NaN on {', '.join(hit)}: {_fmt_rows(rows)} "
        "(pytorch/pytorch#101967).", rows)]


def _disagreement(result: PathsResult) -> list[Finding]:
    paths = _kernel_paths(result)
    if len(paths) < 2:
        return []
    rows = sorted(set().union(*(p.classes.keys() for p in paths)))
    differ: list[Index] = []
    seen: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        classes = {p.run.path: _coarse(p.classes.get(r, "?")) for p in paths}
        if len(set(classes.values())) > 1:
            differ.append(r)
            for path, c in classes.items():
                seen[c].add(path)
    if not differ:
        return []
    said = "; ".join(f"{_WORDS.get(c, c)} on {', '.join(sorted(ps))}"
                     for c, ps in sorted(seen.items()))
    return [_finding(
        "MC062",
        f"the paths disagree on {len(differ)} row(s) {_fmt_rows(differ)}: {said}"
        + (" (pytorch/pytorch#41508)" if result.call.api == "mha" else "") + ".",
        differ)]


def _coarse(c: str) -> str:
    return c


def _silent_leak(result: PathsResult) -> list[Finding]:
    leaks: dict[str, list[Index]] = {}
    weights: dict[str, float] = {}
    empty_leak = False
    for p in _kernel_paths(result):
        rows = [tuple(r) for r in p.run.extra.get("leak_rows", [])]
        if rows:
            leaks[p.run.path] = rows
            weights[p.run.path] = p.run.masked_weight or 0.0
            empty_leak = empty_leak or any(p.classes.get(r) == "attends" for r in rows)
    if not leaks:
        return []
    rows = sorted({r for rs in leaks.values() for r in rs})
    what = ("rows whose every key is masked still attend to those keys as if unmasked"
            if empty_leak else "rows put weight on keys their mask hides")
    per = ", ".join(f"{p} {weights[p]:.3g}" for p in leaks)
    mask = result.call.attn_mask
    hint = ""
    if mask is not None and mask.is_floating_point():
        finite = mask[torch.isfinite(mask)]
        low = float(finite.min()) if finite.numel() else 0.0
        hint = f" The mask's masked value is {low:g} in {str(mask.dtype).removeprefix('torch.')}."
    return [_finding(
        "MC063",
        f"{what}: {_fmt_rows(rows)}; largest weight on hidden keys per path: {per}.{hint}",
        rows)]

