"""Plain data shared by the library, the renderers and the CLI."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rich.console import RenderableType

Convention = Literal[
    "bool-true-masked",
    "bool-true-keep",
    "int-one-keep",
    "int-one-masked",
    "additive",
    "multiplicative",
    "not-a-mask",
    "ambiguous",
]
Role = Literal["key_padding_mask", "attn_mask", "hf_attention_mask", "unknown"]
Api = Literal["mha", "sdpa", "hf", "eager", "flex", "auto"]
Index = tuple[int, ...]


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]

    def at_least(self, other: Severity) -> bool:
        return self.rank >= other.rank


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: Severity
    message: str
    where: tuple[Index, ...] = ()
    fix: str | None = None
    line: int | None = None
    col: int | None = None
    tensor: str | None = None
    cell: int | None = None  # a notebook's cell (1-based over all cells); `line` is in it

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "message": self.message,
            "where": [list(w) for w in self.where],
        }
        if self.fix is not None:
            out["fix"] = self.fix
        if self.line is not None:
            out["line"] = self.line
            out["col"] = self.col if self.col is not None else 0
        if self.tensor is not None:
            out["tensor"] = self.tensor
        if self.cell is not None:
            out["cell"] = self.cell
        return out


@dataclass
class TensorReport:
    name: str
    shape: tuple[int, ...]
    dtype: str
    convention: Convention
    confidence: float
    role: Role
    pattern: list[str]
    masked_fraction: float | None
    findings: list[Finding] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    api: str = "auto"
    # Kept fraction (0..1) per cell for the first (batch, head) matrix, each cell covering
    # preview_scale = (rows, cols) elements; None when there is nothing to draw.
    preview: list[list[float]] | None = None
    preview_scale: tuple[int, int] = (1, 1)
    preview_origin: Index = ()
    # The streaming summary the findings came from; not serialised.
    summary: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "convention": self.convention,
            "confidence": round(self.confidence, 3),
            "role": self.role,
            "pattern": list(self.pattern),
            "masked_fraction": (
                None if self.masked_fraction is None else round(self.masked_fraction, 6)
            ),
            "findings": [f.to_json() for f in self.findings],
            "evidence": list(self.evidence),
            "params": self.params,
            "api": self.api,
        }

    # Shown in a REPL / notebook / rich.print as inspect shows it (render/notebook.py).
    def __repr__(self) -> str:
        from maskcheck.render.notebook import tensor_repr

        return tensor_repr(self)

    def __rich__(self) -> RenderableType:
        from maskcheck.render.notebook import tensor_renderable

        return tensor_renderable(self)

    def _repr_html_(self) -> str:
        from maskcheck.render.notebook import tensor_renderable, to_html

        return to_html(tensor_renderable(self))


@dataclass
class Run:
    api: str
    path: str
    device: str
    dtype: str
    status: Literal["ok", "nan", "error"]
    error: str | None = None
    nan_rows: list[Index] = field(default_factory=list)
    zero_rows: list[Index] = field(default_factory=list)
    max_abs_err: float | None = None
    masked_weight: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "api": self.api,
            "path": self.path,
            "device": self.device,
            "dtype": self.dtype,
            "status": self.status,
            "error": self.error,
            "nan_rows": [list(r) for r in self.nan_rows],
            "zero_rows": [list(r) for r in self.zero_rows],
            "max_abs_err": self.max_abs_err,
            "masked_weight": self.masked_weight,
        }
        out.update(self.extra)
        return out


@dataclass
class FileReport:
    path: str
    error: str | None = None
    tensors: list[TensorReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    runs: list[Run] | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    # Where in the file the `error` is, when known (a syntax error of a `.py` file): 1-based.
    error_line: int | None = None
    error_col: int | None = None

    def all_findings(self) -> list[Finding]:
        out = list(self.findings)
        for t in self.tensors:
            out.extend(t.findings)
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "error": self.error,
            "tensors": [t.to_json() for t in self.tensors],
            "findings": [f.to_json() for f in self.findings],
        }
        if self.runs is not None:
            out["runs"] = [r.to_json() for r in self.runs]
        return out

    def __repr__(self) -> str:
        from maskcheck.render.notebook import file_repr

        return file_repr(self)

    def __rich__(self) -> RenderableType:
        from maskcheck.render.notebook import report_renderable

        return report_renderable(self)

    def _repr_html_(self) -> str:
        from maskcheck.render.notebook import report_renderable, to_html

        return to_html(report_renderable(self))


@dataclass
class Report:
    files: list[FileReport] = field(default_factory=list)

    def all_findings(self) -> list[Finding]:
        return [f for fr in self.files for f in fr.all_findings()]

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for f in self.all_findings():
            counts[f.severity.value] += 1
        return counts

    @property
    def unreadable(self) -> int:
        return sum(1 for f in self.files if f.error is not None)

    def exit_code(self, fail_on: Severity = Severity.ERROR) -> int:
        """CONTRACT exit codes: 2 if a file could not be read, else 1 if findings >= fail_on."""
        if self.unreadable:
            return 2
        if any(f.severity.at_least(fail_on) for f in self.all_findings()):
            return 1
        return 0

    def to_json(self, version: str) -> dict[str, Any]:
        counts = self.counts()
        return {
            "schema": 1,
            "tool": {"name": "maskcheck", "version": version},
            "files": [f.to_json() for f in self.files],
            "summary": {
                "files": len(self.files),
                "tensors": sum(len(f.tensors) for f in self.files),
                "error": counts["error"],
                "warning": counts["warning"],
                "info": counts["info"],
                "unreadable": self.unreadable,
            },
        }

    def __repr__(self) -> str:
        from maskcheck.render.notebook import report_repr

        return report_repr(self)

    def __rich__(self) -> RenderableType:
        from maskcheck.render.notebook import report_renderable

        return report_renderable(self)

    def _repr_html_(self) -> str:
        from maskcheck.render.notebook import report_renderable, to_html

        return to_html(report_renderable(self))
