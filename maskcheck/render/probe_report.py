"""The Rich report of `maskcheck probe`: header, one line per check, findings, and the
dependency picture (intended next to measured, leaks and blind spots marked).

Works from the plain ProbeReport; imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from maskcheck.probe.layout import pad_amounts
from maskcheck.probe.report import CheckResult, Dependency, ProbeReport
from maskcheck.render.attention_report import findings_block

STATUS_STYLE = {"pass": "green", "fail": "bold red", "error": "yellow", "skipped": "dim"}
STATUS_WORD = {"pass": "pass", "fail": "FAIL", "error": "error", "skipped": "skip"}


@dataclass(frozen=True)
class DependencyGlyphs:
    depends: str
    none: str
    weak: str
    leak: str
    blind: str
    unprobed: str
    pad_row: str

    @classmethod
    def for_output(cls, unicode: bool) -> DependencyGlyphs:
        if unicode:
            return cls("█", "·", "▒", "✗", "○", "?", "-")
        return cls("#", ".", "+", "X", "O", "?", "-")


def render_probe(report: ProbeReport, *, width: int, unicode: bool = True,
                 picture: bool = True) -> list[RenderableType]:
    parts: list[RenderableType] = [header(report), Text(""),
                                   checks_table(report.checks, width=width)]
    if picture and report.dependency is not None:
        parts += [Text(""), dependency_picture(report.dependency, width=width, unicode=unicode)]
    parts += [Text(""), findings_block(report.findings)]
    return parts


def header(report: ProbeReport) -> Text:
    pads = pad_amounts(report.batch, report.pad)
    sides = " and ".join(report.sides)
    text = Text()
    text.append("maskcheck probe ", style="bold")
    text.append(report.target, style="bold")
    text.append(f"\nintent: {report.intent.describe()}; {report.dtype} on {report.device}, "
                f"torch {report.torch_version}")
    text.append(f"\nbatch {report.batch} x seq {report.seq}, pads {pads}, {sides} padding; "
                "also each sequence alone, more padding, an all-padding sequence, length 1")
    for note in report.notes:
        text.append(f"\n{note}", style="dim")
    text.append(f"\n{report.forward_passes} forward passes in {report.forward_seconds:.2f} s "
                f"({report.seconds:.2f} s in all); a change counts above {report.tolerance:g} "
                "of the output scale", style="dim")
    return text


def checks_table(found: list[CheckResult], *, width: int) -> Group:
    """One line per check (status, code, check, largest change); the evidence below the
    checks that failed, raised or were skipped."""
    title_w = max((len(c.title) for c in found), default=0)
    lines: list[RenderableType] = []
    for c in found:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(STATUS_WORD[c.status].ljust(5), style=STATUS_STYLE[c.status])
        line.append(f" {c.code} ", style="dim")
        line.append(c.title.ljust(title_w))
        if c.status in ("pass", "fail") and (c.max_diff is not None or c.status == "fail"):
            what = "weakest intended" if c.code == "MC075" else "largest change"
            line.append(f"  {what} {_num(c.max_diff, c.status)}", style="dim")
        lines.append(line)
        if c.status != "pass":
            lines.append(Padding(Text(c.message, style="" if c.status == "fail" else "dim"),
                                 (0, 0, 0, 6)))
    return Group(*lines)


def _num(value: float | None, status: str) -> str:
    if value is None:
        return "NaN/inf" if status == "fail" else "-"
    if value == 0:
        return "0"
    return f"{value:.2g}"


def dependency_picture(dep: Dependency, *, width: int, unicode: bool = True) -> Group:
    """Two query x key grids of one sequence: what the intent allows, what was measured."""
    glyphs = DependencyGlyphs.for_output(unicode)
    size = len(dep.real)
    label_w = len(str(max(0, size - 1)))
    cell = 2 if 4 * size + 2 * label_w + 8 <= width else 1
    both = 2 * size * cell + label_w + 6 <= width
    title = Text()
    title.append(f"dependency of sequence {dep.sequence} ({dep.side} padding)", style="bold")
    title.append("  rows = queries, columns = keys", style="dim")
    grid_w = size * cell
    heads = Text(" " * (label_w + 2), style="dim")
    if both:
        heads.append("intended".ljust(grid_w + 4), style="bold")
    heads.append("measured", style="bold")
    axis = Text(" " * (label_w + 2), style="dim")
    line_axis = _axis(size, cell)
    if both:
        axis.append(line_axis.ljust(grid_w + 4), style="dim")
    axis.append(line_axis, style="dim")
    lines: list[RenderableType] = [title, heads, axis]
    for q in range(size):
        line = Text(no_wrap=True, overflow="crop")
        line.append(str(q).rjust(label_w) + "  ", style="dim")
        if both:
            for k in range(size):
                line.append(*_intended_cell(dep, q, k, glyphs, cell))
            line.append("    ")
        for k in range(size):
            line.append(*_measured_cell(dep, q, k, glyphs, cell))
        if not dep.real[q]:
            line.append("  pad (not judged)", style="dim")
        lines.append(line)
    lines.append(_legend(dep, glyphs, label_w))
    return Group(*lines)


def _axis(size: int, cell: int) -> str:
    step = 1 if cell == 2 or size <= 10 else 4 if size <= 40 else 8
    chars = [" "] * (size * cell + 3)
    for k in range(0, size, step):
        label = str(k)
        if cell == 1 and len(label) > step:
            continue
        chars[k * cell:k * cell + len(label)] = label
    return "".join(chars).rstrip()


def _intended_cell(dep: Dependency, q: int, k: int, g: DependencyGlyphs,
                   cell: int) -> tuple[str, str]:
    if not dep.real[q]:
        return g.pad_row.ljust(cell), "dim"
    if dep.intended[q][k]:
        return g.depends * cell, "green"
    return g.none.ljust(cell), "dim"


def _measured_cell(dep: Dependency, q: int, k: int, g: DependencyGlyphs,
                   cell: int) -> tuple[str, str]:
    value = dep.measured[q][k]
    if not dep.real[q]:
        return g.pad_row.ljust(cell), "dim"
    if value is None:
        return g.unprobed.ljust(cell), "dim"
    if dep.intended[q][k]:
        if value <= dep.blind:
            return g.blind.ljust(cell), "bold yellow"
        return (g.depends * cell, "green") if value > dep.tolerance else (g.weak * cell, "green")
    if value > dep.tolerance:
        return g.leak.ljust(cell), "bold red"
    return g.none.ljust(cell), "dim"


def _legend(dep: Dependency, g: DependencyGlyphs, indent: int) -> Text:
    text = Text(" " * (indent + 2))
    for glyph, style, words in (
        (g.depends, "green", "depends"), (g.weak, "green", "weakly"),
        (g.none, "dim", "no effect"), (g.leak, "bold red", "leak"),
        (g.blind, "bold yellow", "blind spot"),
    ):
        text.append(glyph, style=style)
        text.append(f" {words}  ", style="dim")
    if any(v is None for row in dep.measured for v in row):
        text.append(g.unprobed, style="dim")
        text.append(" key not changed (--positions)", style="dim")
    return text
