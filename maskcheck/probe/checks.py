"""One small unit per probe rule: each turns what the engine measured into a CheckResult.

Indices in `where` are layout positions of the probe batch the message names:
[sequence, query, key] for pairs, [sequence, query] for a single output, and for MC073
[sequence, query, other sequence].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from maskcheck.probe.engine import Run, Sweep, aligned_change, output_scale
from maskcheck.probe.intent import Intent
from maskcheck.probe.layout import Layout
from maskcheck.probe.report import MAX_WHERE, CheckResult


@dataclass(frozen=True)
class Violation:
    where: tuple[int, ...]
    change: float
    text: str  # "sequence 0 query 2 moved when key 5 changed"


def settle(check: CheckResult, violations: Sequence[Violation], *, tolerance: float,
           errors: Iterable[str] = (), judged: Iterable[float] = (), what: str,
           blind: float | None = None) -> CheckResult:
    """Status, where, max_diff and message from the violations and the failed passes.
    With `blind`, violations are outputs that did not move (the message says so)."""
    errors = [e for e in errors if e]
    values = [v.change for v in violations] or list(judged)
    check.max_diff = max(values) if values else None
    check.count = len(violations)
    if violations:
        worst = (min if blind is not None else max)(violations, key=lambda v: v.change)
        check.status = "fail"
        check.where = [v.where for v in violations[:MAX_WHERE]]
        if blind is not None:
            size = f"change {worst.change:.3g} <= {blind:g}"
        elif math.isinf(worst.change):
            size = "became NaN/inf"
        else:
            size = f"relative change {worst.change:.3g} > {tolerance:g}"
        more = f"; {len(violations)} in all" if len(violations) > 1 else ""
        check.message = f"{worst.text} ({size}){more}"
    elif errors:
        check.status = "error"
        check.message = f"the target raised on a probe batch: {errors[0]}"
    else:
        check.status = "pass"
        check.message = what
    if violations and errors:
        check.message += f"; some probe batches raised: {errors[0]}"
    return check


def _own_pairs(sweep: Sweep) -> Iterable[tuple[int, int, int, float, int | None, int | None]]:
    """(row, query, key, change, query token, key token) for real queries and probed keys."""
    layout = sweep.base.layout
    own = sweep.own
    for r in range(layout.batch):
        for q in range(layout.seq):
            qt = layout.token(r, q)
            if qt is None:
                continue  # pad positions' own outputs are never judged
            for k in range(layout.seq):
                value = float(own[r, q, k])
                if not math.isnan(value):
                    yield r, q, k, value, qt, layout.token(r, k)


def check_excluded(sweep: Sweep, intent: Intent, *, reason: str, code: str, name: str,
                   side: str, tolerance: float) -> CheckResult:
    """MC070 (reason "future") / MC077 (reason "window"): a pair the intent excludes moved."""
    found: list[Violation] = []
    judged: list[float] = []
    for r, q, k, value, qt, kt in _own_pairs(sweep):
        if kt is None or qt is None or intent.excluded_by(qt, kt) != reason:
            continue
        judged.append(value)
        if value > tolerance:
            found.append(Violation((r, q, k), value,
                                   f"sequence {r}: output {q} moved when {reason} key {k} "
                                   "changed"))
    what = ("no output depends on a later real position" if reason == "future"
            else f"no output depends on a real position outside the window of {intent.window}")
    return settle(CheckResult(name, code, side), found, tolerance=tolerance,
                  errors=sweep.errors, judged=judged, what=what)


def check_blind_spots(sweep: Sweep, intent: Intent, *, side: str, tolerance: float,
                      blind: float) -> CheckResult:
    """MC075: an intended (query, key) pair whose output did not move at all."""
    found: list[Violation] = []
    weakest = math.inf
    for r, q, k, value, qt, kt in _own_pairs(sweep):
        if kt is None or qt is None or not intent.allows(qt, kt):
            continue
        weakest = min(weakest, value)
        if value <= blind:
            found.append(Violation((r, q, k), value,
                                   f"sequence {r}: output {q} did not move when key {k} "
                                   f"changed, but the intent ({intent.describe()}) says it "
                                   "may depend on it"))
    check = settle(CheckResult("blind-spots", "MC075", side), found, tolerance=tolerance,
                   errors=sweep.errors, blind=blind,
                   what="every real position the intent allows influences its outputs")
    check.max_diff = None if math.isinf(weakest) else weakest
    return check


def check_pad_content(sweep: Sweep, *, side: str, tolerance: float) -> CheckResult:
    """MC071: a real output moved when only a pad position's content changed."""
    layout = sweep.base.layout
    found: list[Violation] = []
    judged: list[float] = []
    for r, q, k, value, _qt, kt in _own_pairs(sweep):
        if kt is not None:
            continue
        judged.append(value)
        if value > tolerance:
            found.append(Violation((r, q, k), value,
                                   f"sequence {r}: real output {q} moved when pad position "
                                   f"{k} changed"))
    for r2, q, r, k, value in sweep.cross:
        if not layout.is_real(r, k):
            found.append(Violation((r2, q, k), value,
                                   f"sequence {r2}: real output {q} moved when pad position "
                                   f"{k} of sequence {r} changed"))
    return settle(CheckResult("pad-content", "MC071", side), found, tolerance=tolerance,
                  errors=sweep.errors, judged=judged,
                  what="changing pad content changes no real output")


def check_batch_isolation(sweep: Sweep | None, alone: dict[int, Run], empty_row: Run | None,
                          *, side: str, tolerance: float) -> CheckResult:
    """MC073: another sequence's content or padding moved a sequence's real outputs."""
    found: list[Violation] = []
    errors: list[str] = []
    if sweep is not None:
        errors += sweep.errors
        for r2, q, r, k, value in sweep.cross:
            found.append(Violation((r2, q, r), value,
                                   f"sequence {r2}: output {q} moved when position {k} of "
                                   f"sequence {r} changed"))
    base = sweep.base if sweep is not None else None
    if base is not None and base.out is not None:
        layout = base.layout
        if empty_row is not None and empty_row.out is None:
            errors.append(f"with an all-padding sequence added: {empty_row.error}")
        elif empty_row is not None:
            scale = output_scale(base.out, base.keep)
            for r in range(layout.batch):
                for t, value in aligned_change(base, r, empty_row, r, scale):
                    if value > tolerance:
                        found.append(Violation(
                            (r, layout.position(r, t), layout.batch), value,
                            f"sequence {r}: output {layout.position(r, t)} moved when an "
                            "all-padding sequence was added to the batch"))
        for r in range(layout.batch):
            single = alone.get(layout.rows[r])
            if layout.padded(r) or single is None or single.out is None:
                continue  # a padded sequence that differs alone is MC072's
            scale = output_scale(single.out, single.keep)
            for t, value in aligned_change(single, 0, base, r, scale):
                if value > tolerance:
                    found.append(Violation(
                        (r, layout.position(r, t), -1), value,
                        f"sequence {r} (unpadded): output {layout.position(r, t)} differs "
                        "from the same sequence run alone"))
    return settle(CheckResult("batch-isolation", "MC073", side), found, tolerance=tolerance,
                  errors=errors, what="no sequence's outputs depend on another sequence")


def check_padding(batches: Sequence[Run], alone: dict[int, Run], *,
                  tolerance: float) -> CheckResult:
    """MC072: a padded sequence's real outputs differ from the same sequence run alone, in any
    of the padded batches (right, left, more padding)."""
    found: list[Violation] = []
    errors = [f"{b.label}: {b.error}" for b in batches if b.error]
    errors += [f"{a.label}: {a.error}" for a in alone.values() if a.error]
    judged: list[float] = []
    for run in batches:
        if run.out is None:
            continue
        layout: Layout = run.layout
        for r in range(layout.batch):
            single = alone.get(layout.rows[r])
            if not layout.padded(r) or single is None or single.out is None:
                continue
            scale = output_scale(single.out, single.keep)
            for t, value in aligned_change(single, 0, run, r, scale):
                judged.append(value)
                if value > tolerance:
                    q = layout.position(r, t)
                    found.append(Violation((r, q), value,
                                           f"{run.label}: sequence {r} output {q} (token {t}) "
                                           "differs from the same sequence run alone"))
    return settle(CheckResult("padding", "MC072", None), found, tolerance=tolerance,
                  errors=errors, judged=judged,
                  what="padding side, padding amount and running alone change no real output")


def check_finite(nonfinite: Sequence[tuple[str, int, int]], boundary: Sequence[Run], *,
                 tolerance: float) -> CheckResult:
    """MC074: NaN/inf in a real output of any probe batch, the boundary batches included."""
    found: list[Violation] = []
    seen: set[tuple[str, int, int]] = set()
    for label, row, q in nonfinite:
        if (label, row, q) in seen:
            continue
        seen.add((label, row, q))
        found.append(Violation((row, q), math.inf,
                               f"{label}: sequence {row} real output {q} is NaN/inf"))
    errors = [f"{b.label}: {b.error}" for b in boundary if b.error]
    check = settle(CheckResult("boundaries", "MC074", None), found, tolerance=tolerance,
                   errors=errors, what="no NaN/inf in a real output of any probe batch "
                   "(all-padding sequence, batch of one, length 1 included)")
    check.max_diff = None
    if found:
        check.message = found[0].text + (f"; {len(found)} in all" if len(found) > 1 else "")
    return check


def check_agreement(name: str, pairs: Sequence[tuple[str, Run, Run]], *, code: str,
                    tolerance: float, errors: Sequence[str], what: str) -> CheckResult:
    """MC076: two ways of running the same batch (implementations, padded vs packed) give
    different real outputs. Each pair is (description, reference run, other run)."""
    found: list[Violation] = []
    judged: list[float] = []
    for text, ref, other in pairs:
        assert ref.out is not None and other.out is not None
        scale = output_scale(ref.out, ref.keep)
        for r in range(ref.layout.batch):
            for t, value in aligned_change(ref, r, other, r, scale):
                judged.append(value)
                if value > tolerance:
                    q = ref.layout.position(r, t)
                    found.append(Violation((r, q), value,
                                           f"{text}: sequence {r} output {q} differs"))
    return settle(CheckResult(name, code, None), found, tolerance=tolerance, errors=errors,
                  judged=judged, what=what)
