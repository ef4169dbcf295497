"""`probe(target, intent=...)`: plan the probe batches, run them, run the checks, report.

Forward passes, with N = batch, L = seq, P = positions perturbed per sequence (L by default)
and S = padding sides (2 for "both"): 2 for the first call (run twice: the target must be
deterministic), S * (1 + N * P) for the sweep (base batch plus one pass
per changed position), N for the sequences alone, S for the extra-padding batches, S for the
batches with an all-padding sequence, 1 for length 1; hf targets add 2 * S for eager/sdpa and
1 for the packed batch. The sweep dominates: it grows as N * L, and `positions` caps it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from maskcheck.errors import UsageError
from maskcheck.model import Finding
from maskcheck.probe import checks
from maskcheck.probe.engine import (
    Prober,
    Run,
    Sweep,
    output_scale,
    relative_change,
    row_scale,
)
from maskcheck.probe.intent import (
    PROBE_DTYPES,
    Intent,
    IntentKind,
    blind_threshold,
    tolerance,
)
from maskcheck.probe.layout import (
    SIDES,
    Layout,
    Side,
    alone,
    base_layout,
    length_one,
    perturbed_positions,
    with_empty_row,
    with_extra_padding,
)
from maskcheck.probe.report import CheckResult, Dependency, ProbeReport, finding_for
from maskcheck.probe.targets import HfTarget, Target, TargetCallError, TargetError, load_target

SWEEP_CODES = frozenset({"MC070", "MC071", "MC073", "MC075", "MC077"})
ALL_CODES = frozenset({"MC070", "MC071", "MC072", "MC073", "MC074", "MC075", "MC076", "MC077"})
IMPLEMENTATIONS = ("eager", "sdpa")


@dataclass(frozen=True)
class ProbeOptions:
    intent: Intent
    seq: int = 8
    batch: int = 3
    pad: int = 2
    padding_side: str = "both"
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    positions: int | None = None
    codes: frozenset[str] = ALL_CODES

    @property
    def sides(self) -> tuple[Side, ...]:
        return SIDES if self.padding_side == "both" else (
            ("left",) if self.padding_side == "left" else ("right",))

    def validate(self) -> None:
        if self.seq < 1 or self.batch < 1:
            raise UsageError("--seq and --batch must be at least 1")
        if not 0 <= self.pad < self.seq:
            raise UsageError(f"--pad must be between 0 and --seq - 1 ({self.seq - 1}): every "
                             "sequence keeps a real token")
        if self.padding_side not in ("left", "right", "both"):
            raise UsageError(f"--padding-side takes left|right|both, not {self.padding_side!r}")
        if self.dtype not in PROBE_DTYPES:
            raise UsageError(f"--dtype takes {'|'.join(PROBE_DTYPES)}, not {self.dtype!r}")
        if self.intent.window is not None and self.intent.window < 1:
            raise UsageError("--window must be at least 1")
        if self.positions is not None and self.positions < 1:
            raise UsageError("--positions must be at least 1")


def probe(target: Any, intent: str = "causal", *, window: int | None = None, seq: int = 8,
          batch: int = 3, pad: int = 2, padding_side: str = "both", dtype: str = "float32",
          device: str = "cpu", seed: int = 0, positions: int | None = None,
          select: Iterable[str] | None = None, ignore: Iterable[str] | None = None,
          ) -> ProbeReport:
    """Probe a module, a callable f(x, keep), or a target string (file.py:FACTORY,
    package.module:FACTORY, hf:MODEL_TYPE, hf:PATH) for mask bugs by what its outputs do.

    Raises TargetError (a MaskcheckError) when the target cannot be imported, built or called
    on the first probe batch, UsageError on bad options.
    """
    from maskcheck.selection import Selection

    if intent not in ("causal", "bidirectional"):
        raise UsageError(f"intent is causal or bidirectional, not {intent!r}")
    kind: IntentKind = "causal" if intent == "causal" else "bidirectional"
    selection = Selection.build(list(select or []), list(ignore or []))
    options = ProbeOptions(Intent(kind, window), seq=seq, batch=batch, pad=pad,
                           padding_side=padding_side, dtype=dtype, device=device, seed=seed,
                           positions=positions,
                           codes=frozenset(c for c in ALL_CODES if selection.allows(c)))
    options.validate()
    return run_probe(target, options)


def run_probe(spec: Any, options: ProbeOptions) -> ProbeReport:
    import torch

    threads = torch.get_num_threads()
    if options.device == "cpu":
        # Probe batches are tiny: intra-op threads gain nothing, and where cores are shared
        # they spin against each other (measured: 1.9 ms per pass with 1 thread, 108 ms with
        # 2 on a loaded 2-core box). Every pass of a probe runs with the same setting.
        torch.set_num_threads(1)
    try:
        return _run_probe(spec, options)
    finally:
        torch.set_num_threads(threads)


def _run_probe(spec: Any, options: ProbeOptions) -> ProbeReport:
    import torch

    started = time.perf_counter()
    torch.manual_seed(options.seed)
    target = load_target(spec, dtype=options.dtype, device=options.device)
    label = spec if isinstance(spec, str) else target.label
    tol = tolerance(options.dtype)
    prober = Prober(target, options.batch, options.seq, options.seed, tol)
    report = ProbeReport(label, options.intent, options.dtype, options.device, options.seq,
                         options.batch, options.pad, options.sides, tol,
                         torch_version=str(torch.__version__), notes=list(target.notes))
    _ProbeRun(prober, target, options, report).execute()
    report.findings = [finding_for(c) for c in report.checks
                       if c.status == "fail" and c.code in options.codes]
    report.forward_passes = target.calls
    report.forward_seconds = target.seconds
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class _ProbeRun:
    prober: Prober
    target: Target
    options: ProbeOptions
    report: ProbeReport

    def wants(self, *codes: str) -> bool:
        return any(c in self.options.codes for c in codes)

    def add(self, check: CheckResult) -> None:
        if check.code in self.options.codes:
            self.report.checks.append(check)

    def execute(self) -> None:
        o = self.options
        tol, blind = self.prober.tolerance, blind_threshold(o.dtype)
        first = base_layout(o.batch, o.seq, o.pad, o.sides[0])
        self._first_call(first)
        bases: dict[Side, Run] = {}
        sweeps: dict[Side, Sweep] = {}
        for side in o.sides:
            layout = base_layout(o.batch, o.seq, o.pad, side)
            name = f"{side}-padded batch"
            if self.wants(*SWEEP_CODES):
                sweeps[side] = self.prober.sweep(name, layout,
                                                 perturbed_positions(o.seq, o.positions))
                bases[side] = sweeps[side].base
            else:
                bases[side] = self.prober.run(name, layout)
        singles = self._alone() if self.wants("MC072", "MC073", "MC074") else {}
        extra = [self.prober.run(f"{side}-padded batch with {self.prober.extra} more pads",
                                 with_extra_padding(bases[side].layout, self.prober.extra))
                 for side in o.sides] if self.wants("MC072", "MC074") else []
        empties = {side: self.prober.run(f"{side}-padded batch plus an all-padding sequence",
                                         with_empty_row(bases[side].layout))
                   for side in o.sides} if self.wants("MC073", "MC074") else {}
        short = [self.prober.run("length 1", length_one(o.batch))] if self.wants("MC074") else []
        for side in o.sides:
            sweep = sweeps.get(side)
            if sweep is not None:
                self._sweep_checks(sweep, side, tol, blind)
            if o.batch == 1:
                self.add(skipped("batch-isolation", "MC073", side,
                                 "a batch of one has no other sequence"))
            else:
                self.add(checks.check_batch_isolation(sweep, singles, empties.get(side),
                                                      side=side, tolerance=tol))
        if o.pad > 0:
            self.add(checks.check_padding([bases[s] for s in o.sides] + extra, singles,
                                          tolerance=tol))
        else:
            self.add(checks.check_padding(extra, singles, tolerance=tol))
        boundary = [*empties.values(), *short, *singles.values()]
        self.add(checks.check_finite(self.prober.nonfinite, boundary, tolerance=tol))
        if isinstance(self.target, HfTarget) and self.wants("MC076"):
            self._hf_checks(self.target, bases, tol)
        if sweeps:
            self.report.dependency = dependency(sweeps[o.sides[0]], o.intent, self.report,
                                                tol, blind)

    def _first_call(self, layout: Layout) -> None:
        """The requested batch must run, and give the same outputs twice: otherwise there is
        nothing to probe (exit 2). A target with randomness left on (dropout outside eval,
        sampled noise) would make every perturbation look like a leak."""
        content, keep = self.prober.assemble(layout)
        try:
            first = self.target(content, keep)
            second = self.target(content, keep)
        except TargetCallError as e:
            raise TargetError(f"{self.report.target}: fails on the first probe batch "
                              f"({layout.describe()}): {e}") from None
        change = relative_change(first, second, row_scale(first, output_scale(first, keep)))
        worst = float(change.masked_fill(~keep, 0.0).max())
        if worst > blind_threshold(self.options.dtype):
            raise TargetError(f"{self.report.target}: not deterministic: the same batch gives "
                              f"outputs {worst:.3g} apart on two calls (dropout or sampling "
                              "left on?); the probe needs the same outputs for the same input")

    def _alone(self) -> dict[int, Run]:
        lengths = base_layout(self.options.batch, self.options.seq, self.options.pad,
                              "right").lengths
        return {r: self.prober.run(f"sequence {r} alone (batch of one, length {n})",
                                   alone(r, n))
                for r, n in enumerate(lengths)}

    def _sweep_checks(self, sweep: Sweep, side: Side, tol: float, blind: float) -> None:
        intent = self.options.intent
        if intent.kind == "causal":
            self.add(checks.check_excluded(sweep, intent, reason="future", code="MC070",
                                           name="causality", side=side, tolerance=tol))
        if intent.window is not None:
            self.add(checks.check_excluded(sweep, intent, reason="window", code="MC077",
                                           name="window", side=side, tolerance=tol))
        self.add(checks.check_blind_spots(sweep, intent, side=side, tolerance=tol,
                                          blind=blind))
        layout = sweep.base.layout
        if any(layout.padded(r) for r in range(layout.batch)):
            self.add(checks.check_pad_content(sweep, side=side, tolerance=tol))
        else:
            self.add(skipped("pad-content", "MC071", side,
                             "no pad positions in this batch (--pad 0 or --batch 1)"))

    def _hf_checks(self, target: HfTarget, bases: dict[Side, Run], tol: float) -> None:
        original = target.implementation()
        pairs: list[tuple[str, Run, Run]] = []
        errors: list[str] = []
        unsupported: set[str] = set()
        try:
            for side, base in bases.items():
                runs: dict[str, Run] = {}
                for impl in IMPLEMENTATIONS:
                    try:
                        target.set_implementation(impl)
                    except TargetCallError:
                        unsupported.add(impl)  # the model refuses it: nothing to compare
                        continue
                    runs[impl] = self.prober.run(f"{side}-padded batch, {impl}", base.layout)
                    error = runs[impl].error
                    if error and _REFUSED_IMPL in error:  # e.g. Gemma2 refuses sdpa on forward
                        unsupported.add(impl)
                    elif error:
                        errors.append(f"{impl}: {error}")
                ok = {k: v for k, v in runs.items() if v.out is not None}
                if "eager" in ok:
                    pairs += [(f"{impl} vs eager ({side} padding)", ok["eager"], run)
                              for impl, run in ok.items() if impl != "eager"]
        finally:
            if original:
                target.set_implementation(original)
        check = checks.check_agreement(
            "implementations", pairs, code="MC076", tolerance=tol, errors=errors,
            what="eager and sdpa agree on every real output")
        if not pairs and not errors:
            ran = ", ".join(sorted(set(IMPLEMENTATIONS) - unsupported)) or "none"
            check = skipped("implementations", "MC076", None,
                            f"the model runs only {ran} of eager/sdpa: nothing to compare")
        if unsupported:
            check.message += f"; not supported by this model: {', '.join(sorted(unsupported))}"
        check.message += ("; flex_attention not run: on CPU it compiles with torch.compile "
                          "first (tens of seconds)")
        self.add(check)
        self.add(self._packed_check(target, bases, tol))

    def _packed_check(self, target: HfTarget, bases: dict[Side, Run], tol: float) -> CheckResult:
        if self.options.intent.kind != "causal" or not target.packs_by_position_ids:
            return skipped("packed", "MC076", None,
                           "transformers reads packed sequences from position ids only in "
                           "the causal masks of masking_utils models")
        base = bases.get("right") or next(iter(bases.values()))
        if base.out is None:
            return skipped("packed", "MC076", None, "the padded batch did not run")
        try:
            content, keep = self.prober.assemble(base.layout)
            packed = target.packed(content, keep)
        except TargetCallError as e:
            return checks.check_agreement("packed", [], code="MC076", tolerance=tol,
                                          errors=[str(e)], what="")
        unpacked = unpack(packed, base)
        return checks.check_agreement(
            "packed", [("packed (padding-free, position ids restarting) vs padded", base,
                        unpacked)], code="MC076", tolerance=tol, errors=[],
            what="the padding-free (packed) batch agrees with the padded one")


def unpack(packed: Any, base: Run) -> Run:
    """A (1, T, D) packed output laid out like the padded batch, so rows line up."""
    import torch

    assert base.out is not None
    layout = base.layout
    right = Layout(layout.rows, layout.lengths, layout.seq, "right")
    out = torch.full((layout.batch, layout.seq, packed.shape[-1]), float("nan"),
                     dtype=packed.dtype)
    start = 0
    for r, n in enumerate(layout.lengths):
        out[r, :n] = packed[0, start:start + n]
        start += n
    keep = torch.tensor(right.keep(), dtype=torch.bool)
    return Run("packed", right, keep, out)


# transformers' words when a model refuses an attention implementation at its forward.
_REFUSED_IMPL = "does not support an attention implementation"


def skipped(name: str, code: str, side: str | None, why: str) -> CheckResult:
    return CheckResult(name, code, side, status="skipped", message=why)


def dependency(sweep: Sweep, intent: Intent, report: ProbeReport, tol: float,
               blind: float) -> Dependency:
    """The matrix of one sequence: the first one a pair finding points at, else the most
    padded one."""
    layout = sweep.base.layout
    row = _row_with_finding(report.checks, layout.side)
    if row is None:
        row = min(range(layout.batch), key=lambda r: (layout.lengths[r], r))
    real = [layout.is_real(row, k) for k in range(layout.seq)]
    intended = [[int(bool(real[q] and real[k] and intent.allows(
        layout.token(row, q) or 0, layout.token(row, k) or 0)))
        for k in range(layout.seq)] for q in range(layout.seq)]
    measured: list[list[float | None]] = [
        [None if v != v else float(v) for v in line] for line in sweep.own[row].tolist()]
    return Dependency(row, layout.side, real, intended, measured, tol, blind)


def _row_with_finding(found: list[CheckResult], side: str) -> int | None:
    for c in found:
        if c.status == "fail" and c.side == side and c.code in SWEEP_CODES and c.where:
            return int(c.where[0][0])
    return None


def findings_of(report: ProbeReport, codes: Iterable[str]) -> list[Finding]:
    wanted = set(codes)
    return [f for f in report.findings if f.code in wanted]
