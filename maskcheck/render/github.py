"""GitHub Actions workflow commands: annotations on the pull request's diff."""

from __future__ import annotations

from maskcheck.model import Finding, Report, Severity
from maskcheck.render.concise import location, printable, printable_path

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, **props: object) -> str:
    fields = ",".join(f"{k}={_escape_property(str(v))}" for k, v in props.items() if v is not None)
    # printable(): no raw escape sequence from a file name or a tensor name reaches the log
    return f"::{level} {fields}::{_escape_data(printable(message))}"


def _finding(path: str, f: Finding, where: str) -> str:
    # A notebook's line is a line of a cell, not of the .ipynb file: the annotation goes on
    # the file and the message says where.
    in_file = f.cell is None
    return _command(_LEVEL[f.severity], f"{where}: {f.code} {f.message}",
                    file=path, line=f.line if in_file else None,
                    col=f.col if in_file else None, title=f"maskcheck ({f.code})")


def render(report: Report) -> str:
    out: list[str] = []
    for file in report.files:
        # A newline in a file name goes out as %0A (GitHub's escape, so the annotation still
        # finds the file); other control characters and undecodable bytes are shown escaped.
        path = "\n".join(printable_path(part) for part in file.path.split("\n"))
        if file.error is not None:
            # the line (and column) of a syntax error, when known, as for a finding
            out.append(_command("error", f"{printable_path(file.path)}: {file.error}",
                                file=path, line=file.error_line, col=file.error_col,
                                title="maskcheck (unreadable)"))
        for f in sorted(file.findings, key=lambda f: (f.cell or 0, f.line or 0, f.col or 0)):
            out.append(_finding(path, f, location(printable_path(file.path), f)))
        for t in file.tensors:
            for f in t.findings:
                out.append(_finding(path, f, f"{printable_path(file.path)}:{printable(t.name)}"))
    return "".join(line + "\n" for line in out)
