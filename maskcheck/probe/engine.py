"""The probe batches, the forward passes and the measured changes (torch).

`Prober` builds every probe batch from one seeded material (each sequence's real tokens are
the same in every batch it appears in), runs the target, records NaN/inf in real outputs and
turns pairs of outputs into relative changes. The checks (`checks.py`) read what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from maskcheck.probe.layout import Layout
from maskcheck.probe.targets import Target, TargetCallError

if TYPE_CHECKING:
    import torch


@dataclass
class Run:
    """One forward pass: its layout, keep mask and outputs, or the error it raised."""

    label: str
    layout: Layout
    keep: torch.Tensor
    out: torch.Tensor | None = None
    error: str | None = None


@dataclass
class Sweep:
    """One base batch and, per (row, perturbed position), the relative change of every output.

    own[r, q, k]: change of row r's output q when row r's position k changed, relative to that
    output's own magnitude (NaN = k not perturbed, the pass failed, or the output was already
    NaN/inf); cross: (row, query, other row, key, change) for every real
    output that moved when another row's position changed.
    """

    base: Run
    scale: float
    own: torch.Tensor
    cross: list[tuple[int, int, int, int, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class Prober:
    target: Target
    batch: int
    seq: int
    seed: int
    tolerance: float
    extra: int = 2
    nonfinite: list[tuple[str, int, int]] = field(default_factory=list)
    _tokens: torch.Tensor | None = None

    def tokens(self) -> torch.Tensor:
        """Each material sequence's real tokens: (batch, seq + extra, ...)."""
        if self._tokens is None:
            import torch

            gen = torch.Generator().manual_seed(self.seed)
            self._tokens = self.target.random((self.batch, self.seq + self.extra), gen)
        return self._tokens

    def assemble(self, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
        """(content, keep) of a layout; pad positions hold seeded filler."""
        import torch

        gen = torch.Generator().manual_seed(self.seed + 1)
        content = self.target.random((layout.batch, layout.seq), gen)
        keep = torch.zeros(layout.batch, layout.seq, dtype=torch.bool)
        tokens = self.tokens()
        for r, (row, n) in enumerate(zip(layout.rows, layout.lengths, strict=True)):
            start = layout.offset(r)
            content[r, start:start + n] = tokens[row, :n]
            keep[r, start:start + n] = True
        return content, keep

    def run(self, label: str, layout: Layout, content: torch.Tensor | None = None,
            keep: torch.Tensor | None = None) -> Run:
        if content is None or keep is None:
            content, keep = self.assemble(layout)
        result = Run(label, layout, keep)
        try:
            result.out = self.target(content, keep)
        except TargetCallError as e:
            result.error = str(e)
            return result
        self._note_nonfinite(result)
        return result

    def _note_nonfinite(self, run: Run) -> None:
        import torch

        assert run.out is not None
        bad = (~torch.isfinite(run.out)).any(-1) & run.keep
        for r, q in bad.nonzero().tolist():
            self.nonfinite.append((run.label, run.layout.rows[r], q))

    def sweep(self, label: str, layout: Layout, positions: list[int]) -> Sweep:
        """Change one position of one row at a time and measure every output."""
        import torch

        content, keep = self.assemble(layout)
        base = self.run(label, layout, content, keep)
        n, length = layout.batch, layout.seq
        own = torch.full((n, length, length), float("nan"), dtype=torch.float64)
        if base.out is None:
            return Sweep(base, 1.0, own, errors=[base.error or ""])
        scale = output_scale(base.out, keep)
        # Each output against its own magnitude: a masked key changes nothing, bit for bit,
        # so no rounding noise enters here, and one huge output (the seed's -1e9 * x) does not
        # hide the others' dependencies.
        rows = row_scale(base.out, scale)
        result = Sweep(base, scale, own)
        gen = torch.Generator().manual_seed(self.seed + 2)
        fresh = self.target.fresh(content, gen)
        unmeasurable = (~torch.isfinite(base.out)).any(-1)
        for r in range(n):
            for k in positions:
                changed = content.clone()
                changed[r, k] = fresh[r, k]
                run = self.run(f"{label}, row {r} position {k} changed", layout, changed, keep)
                if run.out is None:
                    result.errors.append(run.error or "")
                    continue
                rel = relative_change(base.out, run.out, rows)
                # An output that is already NaN/inf cannot move: not measured (MC074's).
                own[r, :, k] = rel[r].masked_fill(unmeasurable[r], float("nan"))
                others = rel.masked_fill(~keep, 0.0)
                others[r] = 0.0
                for r2, q in (others > self.tolerance).nonzero().tolist():
                    result.cross.append((r2, q, r, k, float(others[r2, q])))
        return result


def output_scale(out: torch.Tensor, keep: torch.Tensor) -> float:
    """The largest finite |value| among the real outputs; 1 when there is none."""
    import torch

    values = out[keep]
    values = values[torch.isfinite(values)]
    top = float(values.abs().max()) if values.numel() else 0.0
    return top if top > 0 else 1.0


def row_scale(out: torch.Tensor, fallback: float) -> torch.Tensor:
    """(N, L): the largest finite |value| of each output; `fallback` where that is 0."""
    import torch

    finite = torch.where(torch.isfinite(out), out.abs(), torch.zeros_like(out))
    top = finite.amax(-1)
    return torch.where(top > 0, top, torch.full_like(top, fallback))


def relative_change(ref: torch.Tensor, other: torch.Tensor,
                    scale: float | torch.Tensor) -> torch.Tensor:
    """Per position (N, L): max over features of |ref - other| / scale (a number, or one per
    position). The same NaN or inf in
    both is no change; a value that became (or stopped being) NaN/inf is an infinite one."""
    import torch

    same = (ref == other) | (torch.isnan(ref) & torch.isnan(other))
    diff = (ref - other).abs()
    diff = torch.where(same, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf")))
    return diff.amax(-1) / scale


def aligned_change(ref: Run, ref_row: int, other: Run, other_row: int,
                   scale: float) -> list[tuple[int, float]]:
    """(real-token index, relative change) of one sequence's real outputs in two batches."""
    assert ref.out is not None and other.out is not None
    n = min(ref.layout.lengths[ref_row], other.layout.lengths[other_row])
    a0, b0 = ref.layout.offset(ref_row), other.layout.offset(other_row)
    a = ref.out[ref_row, a0:a0 + n][None]
    b = other.out[other_row, b0:b0 + n][None]
    if a.shape[-1] != b.shape[-1]:
        return [(t, float("inf")) for t in range(n)]
    rel = relative_change(a, b, scale)[0]
    return [(t, float(v)) for t, v in enumerate(rel.tolist())]
