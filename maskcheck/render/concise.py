"""`check`'s default output: one `path:line:col: CODE message` line per finding, as ruff."""

from __future__ import annotations

import os
from collections import Counter

from maskcheck.model import Finding, Report

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` on one line: control and invisible format characters (a newline, an ANSI escape,
    a right-to-left override) escaped as Python does (`\\n`, `\\x1b`, `\\u202e`)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _ESCAPES.get(c) or repr(c)[1:-1] for c in text)


def printable_path(path: str) -> str:
    """A file name on one line, the bytes of a non-UTF-8 name shown as `\\xff`."""
    return printable(os.fsencode(path).decode("utf-8", "backslashreplace"))


def location(path: str, f: Finding) -> str:
    """`path:line:col`, `notebook.ipynb:cell N:line:col`, or the path alone."""
    if f.line is None:
        return path
    cell = f"cell {f.cell}:" if f.cell is not None else ""
    return f"{path}:{cell}{f.line}:{f.col or 1}"


def _order(f: Finding) -> tuple[int, int, int, str]:
    return (f.cell or 0, f.line or 0, f.col or 0, f.code)


def finding_lines(report: Report) -> list[str]:
    out: list[str] = []
    for file in report.files:
        path = printable_path(file.path)
        if file.error is not None:
            out.append(f"{path}: error: {printable(file.error)}")
        for f in sorted(file.findings, key=_order):
            out.append(f"{location(path, f)}: {f.code} {f.message}")
        for tensor in file.tensors:
            for f in tensor.findings:
                # a tensor name comes from the file's header: anything can be in it
                out.append(f"{path}:{printable(tensor.name)}: {f.code} {f.message}")
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
    unreadable = report.unreadable
    files = len(report.files) - unreadable  # the files that were read and checked
    checked = f"{files} file{'s' if files != 1 else ''}"
    tail = f"; {unreadable} could not be read" if unreadable else ""
    if not findings and not unreadable:
        return f"All checks passed ({checked})."
    if not findings:  # nothing passed that was not read
        return f"No problems found in {checked}{tail}."
    counts = report.counts()
    parts = ", ".join(f"{counts[s]} {s}{'s' if counts[s] != 1 and s != 'info' else ''}"
                      for s in ("error", "warning", "info") if counts[s])
    n = len(findings)
    return f"Found {n} problem{'s' if n != 1 else ''} ({parts}) in {checked}{tail}."


def render(report: Report, *, statistics: bool = False) -> str:
    lines = statistics_lines(report) if statistics else finding_lines(report)
    if statistics:
        lines = [f"{printable_path(f.path)}: error: {printable(f.error)}"
                 for f in report.files if f.error] + lines
    lines.append(summary_line(report))
    return "\n".join(lines) + "\n"
