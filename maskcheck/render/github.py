"""GitHub Actions workflow commands: annotations on the pull request's diff."""

from __future__ import annotations

from maskcheck.model import Finding, Report, Severity

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, **props: object) -> str:
    fields = ",".join(f"{k}={_escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level} {fields}::{_escape_data(message)}"


def _finding(path: str, f: Finding, where: str) -> str:
    return _command(_LEVEL[f.severity], f"{where}: {f.code} {f.message}",
                    file=path, line=f.line, col=f.col, title=f"maskcheck ({f.code})")


def render(report: Report) -> str:
    out: list[str] = []
    for file in report.files:
        if file.error is not None:
            out.append(_command("error", f"{file.path}: {file.error}", file=file.path,
                                title="maskcheck (unreadable)"))
        for f in sorted(file.findings, key=lambda f: (f.line or 0, f.col or 0)):
            where = f"{file.path}:{f.line}:{f.col}" if f.line is not None else file.path
            out.append(_finding(file.path, f, where))
        for t in file.tensors:
            for f in t.findings:
                out.append(_finding(file.path, f, f"{file.path}:{t.name}"))
    return "".join(line + "\n" for line in out)
