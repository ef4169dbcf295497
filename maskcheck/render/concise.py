"""`check`'s default output: one `path:line:col: CODE message` line per finding, as ruff."""

from __future__ import annotations

from collections import Counter

from maskcheck.model import Finding, Report


def finding_lines(report: Report) -> list[str]:
    out: list[str] = []
    for file in report.files:
        if file.error is not None:
            out.append(f"{file.path}: error: {file.error}")
        for f in sorted(file.findings, key=lambda f: (f.line or 0, f.col or 0, f.code)):
            where = f"{file.path}:{f.line}:{f.col or 1}" if f.line is not None else file.path
            out.append(f"{where}: {f.code} {f.message}")
        for tensor in file.tensors:
            for f in tensor.findings:
                out.append(f"{file.path}:{tensor.name}: {f.code} {f.message}")
    return out


def statistics_lines(report: Report) -> list[str]:
    findings = report.all_findings()
    counts = Counter(f.code for f in findings)
    names = {f.code: f.name for f in findings}
    width = len(str(max(counts.values(), default=0)))
    return [f"{n:>{width}}\t{code}\t{names[code]}"
            for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def summary_line(report: Report) -> str:
    findings: list[Finding] = report.all_findings()
    files = len(report.files)
    checked = f"{files} file{'s' if files != 1 else ''}"
    unreadable = report.unreadable
    tail = f"; {unreadable} could not be read" if unreadable else ""
    if not findings:
        return f"All checks passed ({checked}){tail}."
    counts = report.counts()
    parts = ", ".join(f"{counts[s]} {s}" for s in ("error", "warning", "info") if counts[s])
    n = len(findings)
    return f"Found {n} problem{'s' if n != 1 else ''} ({parts}) in {checked}{tail}."


def render(report: Report, *, statistics: bool = False) -> str:
    lines = statistics_lines(report) if statistics else finding_lines(report)
    if statistics:
        lines = [f"{f.path}: error: {f.error}" for f in report.files if f.error] + lines
    lines.append(summary_line(report))
    return "\n".join(lines) + "\n"
