"""A mask drawn in the terminal from TensorReport.preview (kept fraction per cell).

Every cell is drawn from what the mask holds (unlike transformers' AttentionMaskVisualizer,
which paints the diagonal whatever the mask says): full cells, empty cells and cells that a
downsampled view only partly keeps look different, and the scale is always stated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Group
from rich.text import Text

from maskcheck.model import TensorReport

# Powers of two: masks are usually sized in them, so labels land on round indices.
_LABEL_STEPS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_EXACT = 1e-9


@dataclass(frozen=True)
class Glyphs:
    kept: str
    masked: str
    partial: str
    empty_row: str

    @classmethod
    def for_output(cls, unicode: bool) -> Glyphs:
        return cls("█", "·", "▒", "✗") if unicode else cls("#", ".", "+", "x")


@dataclass(frozen=True)
class Grid:
    cells: list[list[float]]  # kept fraction per cell
    scale: tuple[int, int]  # elements per cell (rows, cols)
    size: tuple[int, int]  # elements in the whole matrix (rows, cols)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.cells), len(self.cells[0]) if self.cells else 0


def matrix_size(shape: tuple[int, ...]) -> tuple[int, int]:
    if not shape:
        return 1, 1
    return (shape[-2] if len(shape) >= 2 else 1), shape[-1]


def _extent(index: int, scale: int, total: int) -> int:
    """Elements covered by cell `index` of `scale` elements in an axis of `total`."""
    return max(0, min(scale, total - index * scale))


def rebin(grid: Grid, max_rows: int, max_cols: int) -> Grid:
    """Merge cells so the grid fits; merged fractions are weighted by the elements covered."""
    rows, cols = grid.shape
    fr = max(1, math.ceil(rows / max(1, max_rows)))
    fc = max(1, math.ceil(cols / max(1, max_cols)))
    if fr == 1 and fc == 1:
        return grid
    sr, sc = grid.scale
    total_r, total_c = grid.size
    r_w = [_extent(i, sr, total_r) for i in range(rows)]
    c_w = [_extent(j, sc, total_c) for j in range(cols)]
    out: list[list[float]] = []
    for i0 in range(0, rows, fr):
        line: list[float] = []
        for j0 in range(0, cols, fc):
            kept = area = 0.0
            for i in range(i0, min(rows, i0 + fr)):
                for j in range(j0, min(cols, j0 + fc)):
                    w = r_w[i] * c_w[j]
                    kept += grid.cells[i][j] * w
                    area += w
            line.append(kept / area if area else 0.0)
        out.append(line)
    return Grid(out, (sr * fr, sc * fc), grid.size)


def _label_step(count: int, cell_width: int, scale: int, longest: int, at_most: int) -> int:
    for step in _LABEL_STEPS:
        if step * cell_width >= longest + 2 and math.ceil(count / step) <= at_most:
            return step
    return max(1, count)


def _col_axis(cols: int, cell_width: int, scale: int) -> str:
    longest = len(str((cols - 1) * scale))
    step = _label_step(cols, cell_width, scale, longest, at_most=cols)
    axis = [" "] * (cols * cell_width + longest)
    for j in range(0, cols, step):
        label = str(j * scale)
        pos = j * cell_width
        axis[pos : pos + len(label)] = label
    return "".join(axis).rstrip()


def empty_rows_from_findings(report: TensorReport) -> set[int]:
    """Rows of the drawn matrix that MC002 says attend to nothing."""
    origin = tuple(report.preview_origin)
    rows: set[int] = set()
    for f in report.findings:
        if f.code != "MC002":
            continue
        for where in f.where:
            if len(where) == len(origin) + 1 and tuple(where[:-1]) == origin:
                rows.add(where[-1])
    return rows


def row_label(report: TensorReport) -> str:
    if len(report.shape) == 2 and report.role in ("key_padding_mask", "hf_attention_mask"):
        return "sequences"
    return "queries"


def origin_text(report: TensorReport) -> str:
    if not report.preview_origin:
        return report.name
    return f"{report.name}[{', '.join(str(i) for i in report.preview_origin)}]"


def render_picture(
    report: TensorReport,
    *,
    max_width: int = 80,
    max_rows: int = 32,
    unicode: bool = True,
    empty_rows: Iterable[int] | None = None,
) -> Group | None:
    """The first matrix of the mask as text lines, or None when there is nothing to draw."""
    if not report.preview or not report.preview[0]:
        return None
    size = matrix_size(report.shape)
    glyphs = Glyphs.for_output(unicode)
    label_width = len(str(max(0, size[0] - 1)))
    room = max(8, max_width - label_width - 6)  # label, gap and the row marker
    grid = rebin(Grid(report.preview, report.preview_scale, size), max_rows, room)
    rows, cols = grid.shape
    cell_width = 2 if cols <= 40 and cols * 2 <= room else 1
    marked = set(empty_rows_from_findings(report) if empty_rows is None else empty_rows)
    lines = [_title(report, grid), _axis_line(grid, cell_width, label_width)]
    step = 1 if rows <= 16 else _label_step(rows, 1, 1, 0, at_most=16)
    any_marker = False
    sr = grid.scale[0]
    for i, cells in enumerate(grid.cells):
        band = range(i * sr, min(size[0], (i + 1) * sr))
        is_empty = all(c <= _EXACT for c in cells) or any(r in marked for r in band)
        any_marker |= is_empty
        label = str(i * sr) if i % step == 0 else ""
        lines.append(_row_line(cells, label.rjust(label_width), cell_width, glyphs, is_empty))
    lines.append(_legend(report, grid, glyphs, any_marker, label_width))
    return Group(*lines)


def _title(report: TensorReport, grid: Grid) -> Text:
    rows, cols = grid.size
    text = Text()
    text.append(origin_text(report), style="bold")
    what = row_label(report)
    if rows == 1:
        what = what[:-1]
    text.append(f"  {rows} {what} x {cols} key{'' if cols == 1 else 's'}", style="dim")
    if grid.scale != (1, 1):
        text.append(f", each cell = {grid.scale[0]}x{grid.scale[1]} elements", style="dim")
    return text


def _legend(report: TensorReport, grid: Grid, glyphs: Glyphs, marker: bool, indent: int) -> Text:
    text = Text(" " * (indent + 2))
    text.append(glyphs.kept, style="green")
    text.append(" kept  ", style="dim")
    text.append(glyphs.masked, style="dim")
    text.append(" masked", style="dim")
    if grid.scale != (1, 1):
        text.append("  ")
        text.append(glyphs.partial, style="yellow")
        text.append(" partly kept", style="dim")
    if marker:
        what = "query row" if row_label(report) == "queries" else "sequence"
        text.append("  ")
        text.append(glyphs.empty_row, style="bold red")
        text.append(f" {what} with no key to attend", style="dim")
    return text


def _axis_line(grid: Grid, cell_width: int, label_width: int) -> Text:
    axis = _col_axis(grid.shape[1], cell_width, grid.scale[1])
    return Text(" " * (label_width + 2) + axis, style="dim")


def _row_line(
    cells: list[float], label: str, cell_width: int, glyphs: Glyphs, is_empty: bool
) -> Text:
    line = Text(no_wrap=True, overflow="crop")
    line.append(label + "  ", style="dim")
    for c in cells:
        if c >= 1 - _EXACT:
            line.append(glyphs.kept * cell_width, style="green")
        elif c <= _EXACT:
            line.append(glyphs.masked.ljust(cell_width), style="dim")
        else:
            line.append(glyphs.partial * cell_width, style="yellow")
    if is_empty:
        line.append(" " + glyphs.empty_row, style="bold red")
    return line
