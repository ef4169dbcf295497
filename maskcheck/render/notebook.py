"""How reports show themselves in a REPL, a notebook or `rich.print` (`__rich__`,
`_repr_html_`, `__repr__` of the model classes call here; rich is imported only then)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from maskcheck.model import FileReport, Finding, Report, TensorReport

HTML_WIDTH = 100


def tensor_renderable(t: TensorReport, width: int = HTML_WIDTH) -> RenderableType:
    """What `inspect` prints for one tensor: its table row, its picture and its findings."""
    from rich.console import Group
    from rich.text import Text

    from maskcheck.render.rich_report import RenderOptions, tensor_section, tensor_table

    opts = RenderOptions(width=width)
    parts: list[RenderableType] = [tensor_table([t], opts)]
    if t.convention != "not-a-mask":
        parts += [Text(), tensor_section(t, opts)]
    return Group(*parts)


def report_renderable(report: Report | FileReport, width: int = HTML_WIDTH) -> RenderableType:
    from rich.console import Group

    from maskcheck.model import Report
    from maskcheck.render.rich_report import RenderOptions, report_parts

    whole = report if isinstance(report, Report) else Report(files=[report])
    return Group(*report_parts(whole, RenderOptions(width=width)))


def to_html(renderable: RenderableType, width: int = HTML_WIDTH) -> str:
    """A self-contained <pre> block with inline styles (notebooks strip <style> sheets)."""
    from maskcheck.render.console import print_parts, recording_console

    console = recording_console(width)
    print_parts(console, renderable)
    return console.export_html(
        inline_styles=True,
        code_format='<pre style="font-family:Menlo,\'DejaVu Sans Mono\',consolas,monospace;'
                    'line-height:1.2">{code}</pre>')


def tensor_repr(t: TensorReport) -> str:
    shape = ",".join(str(d) for d in t.shape)
    pattern = " ".join(t.pattern) or "no pattern"
    return (f"<TensorReport {t.name!r} {t.dtype}[{shape}] {t.convention} {pattern}; "
            f"{_findings(t.findings)}>")


def report_repr(report: Report) -> str:
    counts = report.counts()
    tensors = sum(len(f.tensors) for f in report.files)
    return (f"<Report {_n(len(report.files), 'file')}, {_n(tensors, 'tensor')}: "
            f"{_n(counts['error'], 'error')}, {_n(counts['warning'], 'warning')}, "
            f"{_n(counts['info'], 'info')}, {report.unreadable} unreadable>")


def file_repr(fr: FileReport) -> str:
    if fr.error is not None:
        return f"<FileReport {fr.path!r} unreadable: {fr.error}>"
    return (f"<FileReport {fr.path!r} {_n(len(fr.tensors), 'tensor')}; "
            f"{_findings(fr.all_findings())}>")


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _findings(findings: Sequence[Finding]) -> str:
    codes = [f.code for f in findings]
    if not codes:
        return "no findings"
    shown = ", ".join(codes[:5]) + (", ..." if len(codes) > 5 else "")
    return f"{_n(len(codes), 'finding')} ({shown})"
