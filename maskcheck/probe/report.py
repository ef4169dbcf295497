"""The probe's results as plain data: checks, findings, the dependency matrix, JSON.

No torch and no Rich: the engine fills it, `render/probe_report.py` draws it, the CLI and
`maskcheck.testing` read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from maskcheck.model import Finding, Severity
from maskcheck.probe.intent import Intent
from maskcheck.rules.registry import get_rule

Status = Literal["pass", "fail", "error", "skipped"]
MAX_WHERE = 20


@dataclass
class CheckResult:
    """One check on one padding side (or on both, side None)."""

    name: str
    code: str
    side: str | None
    status: Status = "pass"
    max_diff: float | None = None
    where: list[tuple[int, ...]] = field(default_factory=list)
    message: str = ""
    # Every violation found (where holds the first MAX_WHERE of them).
    count: int = 0

    @property
    def title(self) -> str:
        return self.name if self.side is None else f"{self.name} ({self.side} padding)"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "code": self.code,
            "padding_side": self.side,
            "status": self.status,
            "max_diff": _round(self.max_diff),
            "where": [list(w) for w in self.where],
            "count": self.count,
            "message": self.message,
        }


@dataclass
class Dependency:
    """Query x key for one sequence of one probe batch, in that batch's layout indices."""

    sequence: int
    side: str
    real: list[bool]  # which layout positions hold real tokens
    intended: list[list[int]]  # 1 = the intent says the query may depend on the key
    measured: list[list[float | None]]  # relative change of the query's output; None = not probed
    tolerance: float
    blind: float

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "padding_side": self.side,
            "real": list(self.real),
            "intended": self.intended,
            "measured": [[_round(v) for v in row] for row in self.measured],
        }


@dataclass
class ProbeReport:
    target: str
    intent: Intent
    dtype: str
    device: str
    seq: int
    batch: int
    pad: int
    sides: tuple[str, ...]
    tolerance: float
    checks: list[CheckResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    dependency: Dependency | None = None
    forward_passes: int = 0
    forward_seconds: float = 0.0  # in the target's forward passes
    seconds: float = 0.0  # in all, building the target included
    torch_version: str = ""
    notes: list[str] = field(default_factory=list)

    def exit_code(self, fail_on: Severity = Severity.ERROR) -> int:
        return 1 if any(f.severity.at_least(fail_on) for f in self.findings) else 0

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for f in self.findings:
            counts[f.severity.value] += 1
        return counts

    def to_json(self, version: str) -> dict[str, Any]:
        counts = self.counts()
        return {
            "schema": 1,
            "tool": {"name": "maskcheck", "version": version},
            "probe": {
                "target": self.target,
                "intent": self.intent.kind,
                "window": self.intent.window,
                "dtype": self.dtype,
                "device": self.device,
                "seq": self.seq,
                "batch": self.batch,
                "pad": self.pad,
                "padding_sides": list(self.sides),
                "tolerance": self.tolerance,
                "forward_passes": self.forward_passes,
                "forward_seconds": round(self.forward_seconds, 4),
                "checks": [c.to_json() for c in self.checks],
                "findings": [f.to_json() for f in self.findings],
                "dependency": None if self.dependency is None else self.dependency.to_json(),
            },
            "summary": {
                "checks": len(self.checks),
                "failed": sum(c.status == "fail" for c in self.checks),
                "errors": sum(c.status == "error" for c in self.checks),
                "error": counts["error"],
                "warning": counts["warning"],
                "info": counts["info"],
            },
        }


def finding_for(check: CheckResult) -> Finding:
    """The finding a failed check reports, with the registry's name and severity."""
    rule = get_rule(check.code)
    if rule is None:  # every probe code is registered in probe/catalog.py
        raise KeyError(check.code)
    return Finding(rule.code, rule.name, rule.severity, check.message, tuple(check.where),
                   fix=rule.fix or None)


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None  # JSON has no NaN or inf: a change to NaN/inf is said in the message
    return float(f"{value:.4g}")
