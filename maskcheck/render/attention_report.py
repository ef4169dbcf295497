"""Rich rendering of `replay` and `simulate` results: per-path table, row outcomes, heatmaps.

Works from plain data (Run, Finding, TensorReport and nested lists of floats); imports no torch.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from maskcheck.model import FileReport, Finding, Index, Run, Severity, TensorReport
from maskcheck.render.picture import Glyphs, Grid, rebin
from maskcheck.render.rich_report import compress_ranges

SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow",
                  Severity.INFO: "bold blue"}
STATUS_STYLE = {"ok": "green", "nan": "bold red", "error": "yellow"}
CLASS_STYLE = {"correct": "green", "wrong": "bold red", "nan": "bold red", "zero": "cyan",
               "uniform": "magenta", "attends": "bold red", "empty": "dim"}
CLASS_WORD = {"correct": "ok", "wrong": "WRONG", "nan": "NaN", "zero": "zeros",
              "uniform": "uniform", "attends": "LEAKS", "empty": "(no key)"}
_SHADES = " ░▒▓█"
_ASCII_SHADES = " .:+#"
MAX_ROWS_SHOWN = 12


@dataclass
class PathView:
    """What the renderer needs of one path (built by the command from PathResult)."""

    run: Run
    classes: dict[Index, str] = field(default_factory=dict)
    heatmap: list[list[float]] | None = None  # one (L, S) weight matrix; NaN = NaN


def rows_text(rows: Sequence[Sequence[int]], limit: int = 4) -> str:
    """[(1,0),(1,1),(1,2),(0,3)] -> '(0,3) (1,0-2)': rows grouped by their leading index."""
    if not rows:
        return "-"
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in rows:
        groups.setdefault(tuple(r[:-1]), []).append(int(r[-1]))
    parts = []
    for prefix in sorted(groups):
        last = _ranges(groups[prefix])
        parts.append("(" + ",".join([*map(str, prefix), last]) + ")")
    shown = " ".join(parts[:limit])
    return shown + (f" +{len(parts) - limit} more" if len(parts) > limit else "")


def _ranges(values: Sequence[int]) -> str:
    parts = compress_ranges(values).split(", ")
    return " ".join(parts) if len(parts) <= 3 else " ".join(parts[:3]) + " …"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:.3g}"


def runs_table(views: Sequence[PathView], *, width: int) -> Table:
    narrow = width < 80
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    table.add_column("path", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("NaN rows", overflow="fold")
    if not narrow:
        table.add_column("zero rows", overflow="fold")
    table.add_column("max err", justify="right", no_wrap=True)
    table.add_column("masked w", justify="right", no_wrap=True)
    for v in views:
        r = v.run
        cells: list[Any] = [r.path, Text(r.status, style=STATUS_STYLE.get(r.status, "")),
                            rows_text(r.nan_rows, 2 if narrow else 4)]
        if not narrow:
            cells.append(rows_text(r.zero_rows))
        cells += [_num(r.max_abs_err), _num(r.masked_weight)]
        table.add_row(*cells)
    return table


def run_note(r: Run) -> str:
    notes: list[str] = []
    if r.error:
        notes.append(r.error)
    if r.extra.get("picked"):
        notes.append(f"torch picks {r.extra['picked']}")
    if "fast_path_ran" in r.extra:
        notes.append("fast path ran" if r.extra["fast_path_ran"]
                     else "torch did not take the fast path")
    if r.extra.get("note"):
        notes.append(str(r.extra["note"]))
    for w in r.extra.get("warnings", [])[:1]:
        notes.append(f"warning: {w}")
    return "; ".join(notes)


def outcome_grid(views: Sequence[PathView], *, width: int,
                 limit: int = MAX_ROWS_SHOWN) -> Table | None:
    """Rows where some path is not simply correct, one column per path."""
    rows = sorted({i for v in views for i, c in v.classes.items() if c != "correct"})
    if not rows:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  title="rows that are not simply correct", title_justify="left")
    table.add_column("row", no_wrap=True)
    for v in views:
        table.add_column(_short(v.run.path, width), no_wrap=True)
    for i in rows[:limit]:
        cells: list[Any] = ["(" + ",".join(map(str, i)) + ")"]
        for v in views:
            c = v.classes.get(i, "")
            if v.run.path == "reference":
                c = "empty" if list(i) in [list(r) for r in v.run.nan_rows] else "correct"
            if v.run.status == "error":
                cells.append(Text("error", style="yellow"))
                continue
            cells.append(Text(CLASS_WORD.get(c, c), style=CLASS_STYLE.get(c, "")))
        table.add_row(*cells)
    if len(rows) > limit:
        table.caption = f"{len(rows) - limit} more rows not shown"
    return table


def _short(path: str, width: int) -> str:
    if width >= 80:
        return path
    return {"need_weights": "need_w", "no_weights": "no_w", "fast_path": "fast",
            "reference": "ref", "efficient": "effic", "default": "dflt"}.get(path, path)


def findings_block(findings: Sequence[Finding]) -> RenderableType:
    if not findings:
        return Text("no findings", style="green")
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    parts: list[RenderableType] = []
    for f in sorted(findings, key=lambda f: (order[f.severity], f.code)):
        head = Text()
        head.append(f"{f.code} ", style=SEVERITY_STYLE[f.severity])
        head.append(f"{f.severity.value} ", style=SEVERITY_STYLE[f.severity])
        head.append(f.name, style="bold")
        if f.tensor:
            head.append(f"  [{f.tensor}]", style="dim")
        parts.append(head)
        parts.append(Text("  " + f.message))
        if f.fix:
            parts.append(Text("  fix: " + f.fix, style="dim"))
    return Group(*parts)


def tensors_block(tensors: Sequence[TensorReport]) -> RenderableType | None:
    if not tensors:
        return None
    parts: list[RenderableType] = []
    for t in tensors:
        line = Text()
        line.append(t.name, style="bold")
        line.append(f"  {tuple(t.shape)} {t.dtype}  {t.convention}  role={t.role}")
        if t.pattern:
            line.append("  [" + ", ".join(t.pattern) + "]")
        parts.append(line)
        for f in t.findings:
            parts.append(Text.assemble(("  " + f.code + " ", SEVERITY_STYLE[f.severity]),
                                       f.name + ": " + f.message))
    return Group(*parts)


# Pictures fit the screen as inspect's do: at most this many rows, cells merged beyond.
MAX_PICTURE_ROWS = 32
MAX_PICTURE_COLS = 40


def fit_grid(matrix: Sequence[Sequence[float]], max_rows: int, max_cols: int) -> Grid:
    """`matrix` (L, S) merged into at most max_rows x max_cols cells (mean per cell)."""
    rows = len(matrix)
    cols = len(matrix[0]) if rows else 0
    return rebin(Grid([list(r) for r in matrix], (1, 1), (rows, cols)), max_rows, max_cols)


def heatmap(matrix: Sequence[Sequence[float]], *, unicode: bool = True,
            hidden: Sequence[Sequence[bool]] | None = None, max_cols: int = MAX_PICTURE_COLS,
            max_rows: int = MAX_PICTURE_ROWS) -> Text:
    """Weights as shade characters; NaN as '!', hidden keys shaded, weight on them red.

    A long sequence is drawn in merged cells: each shows the weight its queries put on its
    keys (summed over the keys, averaged over the queries), so shades keep their meaning.
    """
    shades = _SHADES if unicode else _ASCII_SHADES
    weights = fit_grid(matrix, max_rows, max_cols)
    sr, sc = weights.scale
    on_hidden = hid = None
    if hidden is not None:
        flags = [[1.0 if h else 0.0 for h in row] for row in hidden]
        hid = fit_grid(flags, max_rows, max_cols)
        # Weight on hidden keys (NaN counts as none: it has its own '!').
        on_hidden = fit_grid([[0.0 if math.isnan(w) else w * h for w, h in zip(wr, hr,
                                                                                 strict=True)]
                              for wr, hr in zip(matrix, flags, strict=True)], max_rows, max_cols)
    out = Text()
    if (sr, sc) != (1, 1):
        out.append(f"each cell = {sr}x{sc} (queries x keys): weight summed over its keys\n",
                   style="dim")
    cols = weights.shape[1]
    width = 2 if cols <= 20 else 1
    for i, row in enumerate(weights.cells):
        out.append(f"{i * sr:>3} ", style="dim")
        for j, mean in enumerate(row):
            w = mean * sc
            style = "on grey23" if hid is not None and hid.cells[i][j] >= 1.0 - 1e-9 else ""
            if isinstance(w, float) and math.isnan(w):
                out.append("!" * width, style="bold red " + style)
                continue
            level = min(len(shades) - 1, max(0, math.ceil(w * (len(shades) - 1) - 1e-9)))
            ch = shades[level] if w > 1e-6 else ("·" if unicode else ".")
            if on_hidden is not None and on_hidden.cells[i][j] * sc > 1e-3:
                style = "bold red " + style
            out.append(ch * width, style=style)
        out.append("\n")
    out.rstrip()
    return out


def legend(unicode: bool = True) -> Text:
    shades = _SHADES if unicode else _ASCII_SHADES
    dot = "·" if unicode else "."
    return Text(f"weight: {dot} 0  {shades[1]} <.25  {shades[2]} <.5  {shades[3]} <.75  "
                f"{shades[4]} >=.75  ! NaN; red = weight on a key the mask hides", style="dim")


def replay_header(info: dict[str, Any], path: str) -> Text:
    t = Text()
    t.append(f"replay {path}\n", style="bold")
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in info.get("shapes", {}).items())
    t.append(f"api {info.get('api')}  device {info.get('device')}  dtype {info.get('dtype')}  "
             f"torch {info.get('torch')}\n")
    t.append(shapes)
    if info.get("kwargs"):
        kw = {k: v for k, v in info["kwargs"].items() if v not in (None, False)}
        if kw:
            t.append("\nkwargs " + ", ".join(f"{k}={v}" for k, v in sorted(kw.items())))
    if info.get("self_attention"):
        t.append("\nself-attention: query, key and value are one tensor")
    for line in info.get("replay_differs") or ():
        t.append(f"\nreplayed differently: {line}", style="yellow")
    if info.get("generated"):
        t.append("\nq/k/v generated (seeded) to fit the mask", style="dim")
    if info.get("picked"):
        t.append(f"\ntorch's default SDPA backend for these inputs: {info['picked']} "
                 "(torch._fused_sdp_choice)")
    unavailable = info.get("unavailable") or {}
    if unavailable:
        why = next(iter(unavailable.values())).split(". ")[0]
        t.append(f"\nnot available on {info.get('device')}: {', '.join(unavailable)} ({why})",
                 style="dim")
    return t


def render_replay(report: FileReport, views: Sequence[PathView], info: dict[str, Any], *,
                  width: int) -> RenderableType:
    parts: list[RenderableType] = [replay_header(info, report.path), Text(""),
                                   runs_table(views, width=width)]
    grid = outcome_grid(views, width=width)
    if grid is not None:
        parts += [Text(""), grid]
    notes = [f"{v.run.path}: {run_note(v.run)}" for v in views if run_note(v.run)]
    if notes:
        parts += [Text(""), Text("\n".join(notes), style="dim")]
    parts += [Text(""), Text("findings", style="bold underline"),
              findings_block(report.findings)]
    tb = tensors_block(report.tensors)
    if tb is not None:
        parts += [Text(""), Text("masks", style="bold underline"), tb]
    return Group(*parts)


def paste_safe(code: str, width: int) -> str:
    """The snippet re-wrapped as Python, so that what is on the screen pastes and runs.

    Left to the terminal (or rich), `x = f(y)   # note` wraps the end of the comment onto a
    line without '#', and long calls break anywhere. Here a trailing comment that does not fit
    goes on its own line above its code, and a long line breaks where Python allows it: after
    a comma or an opening bracket inside brackets, else with a backslash.
    """
    out: list[str] = []
    depth = 0
    for line in code.splitlines():
        code_part, comment = _split_comment(line)
        if len(line) > width and comment and code_part.strip():
            lead = line[:len(line) - len(line.lstrip())]
            out.extend(_break_line(lead + comment, width, 0))
            line = code_part.rstrip()
        out.extend(_break_line(line, width, depth))
        depth = _scan(line, len(line), depth)[0]
    return "\n".join(out)


def _scan(line: str, stop: int, depth: int) -> tuple[int, int | None]:
    """(bracket depth at `stop`, index of a '#' comment before it or None), quotes skipped."""
    quote = ""
    for i, ch in enumerate(line[:stop]):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return depth, i
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return depth, None


def _split_comment(line: str) -> tuple[str, str]:
    at = _scan(line, len(line), 0)[1]
    return (line, "") if at is None else (line[:at], line[at:])


def _break_line(line: str, width: int, depth: int, indent: str | None = None) -> list[str]:
    """`line` as lines of at most `width` where break points allow. `depth`: brackets open
    before the line; `indent`: of the continuation lines."""
    if len(line) <= width:
        return [line]
    if line.lstrip().startswith("#"):
        lead = line[:len(line) - len(line.lstrip())]
        return textwrap.wrap(line.lstrip()[1:].strip(), max(8, width - len(lead) - 2),
                             initial_indent=lead + "# ", subsequent_indent=lead + "# ",
                             break_long_words=False) or [line]
    if indent is None:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
    # The best break within the width; else the first beyond it (shorter beats nothing).
    cut = _break_point(line, width, depth) or _break_point(line, len(line), depth, first=True)
    if cut is None or cut[0] >= len(line.rstrip()):
        return [line]
    head, tail, inside = line[:cut[0]].rstrip(), line[cut[0]:].lstrip(), cut[1]
    if not inside:
        head += " \\"
    return [head, *_break_line(indent + tail, width, _scan(line, cut[0], depth)[0], indent)]


def _break_point(line: str, width: int, depth: int, *,
                 first: bool = False) -> tuple[int, bool] | None:
    """(index to break at, inside brackets) of the best legal break within `width`; None if
    there is none. `first`: the first break point of any kind instead.

    Best: the last comma or opening bracket inside brackets, then the last space outside
    them (with a backslash), then before the last attribute dot (`torch.nn \\ .functional`).
    """
    quote = ""
    inside: int | None = None
    space: int | None = None
    dot: tuple[int, bool] | None = None
    start = len(line) - len(line.lstrip())
    for i, ch in enumerate(line[:width + 1]):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        elif ch in "([{":
            depth += 1
            inside = i + 1 if start < i + 1 <= width else inside
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth > 0 and i + 1 <= width:
            inside = i + 1
        elif ch == " " and start < i <= width - 2 and line[i + 1:].strip():
            if depth > 0:
                inside = i
            else:
                space = i
        elif (ch == "." and start < i <= width - 2 and line[i - 1].isidentifier()
              and line[i + 1:i + 2].isidentifier()):
            dot = (i, depth > 0)
        if first and (inside or space or dot):
            break
    if inside is not None:
        return inside, True
    if space is not None:
        return space, False
    return dot


def code_block(code: str, *, color: bool, width: int = 10_000) -> RenderableType:
    # Never wrapped by rich (no_wrap / word_wrap=False, overflow "ignore"): a line longer than
    # the screen stays one line of code when copied.
    code = paste_safe(code, width)
    if not color:
        return Text(code, no_wrap=True, overflow="ignore")
    from rich.syntax import Syntax  # pygments: only where colours are shown

    text = Syntax(code, "python", theme="ansi_dark", background_color="default").highlight(code)
    text.rstrip()
    text.no_wrap = True
    text.overflow = "ignore"
    return text


# ------------------------------------------------------------------------------- simulate


@dataclass
class ScenarioView:
    name: str
    title: str
    code: str
    views: list[PathView]
    findings: list[Finding]
    verdict: list[str]
    error: str | None = None
    hidden: list[list[bool]] | None = None  # the (L, S) keys meant to be hidden, shown batch


def _summary_lines(views: Sequence[PathView]) -> list[Text]:
    """One measured line per path: what it did to the rows (no claims beyond the numbers)."""
    lines: list[Text] = []
    for v in views:
        r = v.run
        if r.path == "reference":
            continue
        t = Text(f"{r.path}: ", style="bold")
        if r.status == "error":
            t.append(f"refused: {r.error}", style="yellow")
            lines.append(t)
            continue
        counts: dict[str, int] = {}
        for c in v.classes.values():
            counts[c] = counts.get(c, 0) + 1
        bits = []
        for c in ("nan", "zero", "uniform", "attends", "wrong"):
            if counts.get(c):
                bits.append(f"{counts[c]} {CLASS_WORD[c]}")
        if not bits:
            t.append("every row correct", style="green")
        else:
            t.append(", ".join(bits) + f" of {len(v.classes)} rows",
                     style="bold red" if {"nan", "attends", "wrong"} & counts.keys() else "")
        if r.masked_weight:
            t.append(f"; weight on masked keys up to {r.masked_weight:.3g}", style="red")
        lines.append(t)
    return lines


def render_scenario(s: ScenarioView, *, width: int, unicode: bool, color: bool,
                    batch: int, heat: bool = True) -> RenderableType:
    from rich.columns import Columns

    parts: list[RenderableType] = [Text(s.title, style="bold underline")]
    parts.append(code_block(s.code, color=color, width=width))
    if s.error:
        parts.append(Text(f"torch refused: {s.error}", style="yellow"))
    for line in s.verdict:
        parts.append(Text(line, style="yellow"))
    if s.views:
        parts.append(runs_table(s.views, width=width))
        parts.extend(_summary_lines(s.views))
        grid = outcome_grid(s.views, width=width, limit=8)
        if grid is not None:
            parts.append(grid)
    if heat and s.views:
        maps = []
        seen: set[str] = set()
        for v in s.views:
            if v.heatmap is None or v.run.status == "error":
                continue
            key = repr([[round(x, 2) if not math.isnan(x) else -1 for x in row]
                        for row in v.heatmap])
            label = v.run.path
            if key in seen:
                continue
            seen.add(key)
            same = [o.run.path for o in s.views if o.heatmap is not None and repr(
                [[round(x, 2) if not math.isnan(x) else -1 for x in row] for row in o.heatmap]
            ) == key]
            label = " = ".join(same)
            maps.append(Group(Text(label, style="bold"),
                              heatmap(v.heatmap, unicode=unicode, hidden=s.hidden)))
        if maps:
            parts.append(Text(f"attention weights, batch {batch}, head 0 (rows = queries):",
                              style="dim"))
            parts.append(Columns(maps, padding=(0, 3)))
    if s.findings:
        parts.append(findings_block(s.findings))
    return Group(*parts)


def render_simulation(header: Text, keep_pic: RenderableType, scenarios: Sequence[ScenarioView],
                      mistakes: Sequence[ScenarioView], fix: str, fix_api: str, *,
                      width: int, unicode: bool, color: bool, batch: int) -> RenderableType:
    rule = "─" if unicode else "-"
    parts: list[RenderableType] = [header, keep_pic, Text("")]
    if scenarios:
        parts.append(Text("the right mask for each API, run on every path", style="bold"))
        parts.append(Text(rule * min(width, 60), style="dim"))
        parts.append(legend(unicode))
        for s in scenarios:
            parts += [render_scenario(s, width=width, unicode=unicode, color=color,
                                      batch=batch), Text("")]
    if mistakes:
        parts.append(Text("common mistakes, run for real", style="bold"))
        parts.append(Text(rule * min(width, 60), style="dim"))
        for s in mistakes:
            parts += [render_scenario(s, width=width, unicode=unicode, color=color,
                                      batch=batch, heat=len(mistakes) == 1), Text("")]
    parts.append(Text(f"the right mask for {fix_api}:", style="bold"))
    parts.append(code_block(fix, color=color, width=width))
    return Group(*parts)


def keep_picture(keep: Sequence[Sequence[Sequence[bool]]], lengths: Sequence[int], *,
                 unicode: bool, batch: int, max_rows: int = MAX_PICTURE_ROWS,
                 max_cols: int = MAX_PICTURE_COLS) -> RenderableType:
    glyphs = Glyphs.for_output(unicode)
    on, off = glyphs.kept, glyphs.masked
    grid = fit_grid([[1.0 if x else 0.0 for x in row] for row in keep[batch]], max_rows,
                    max_cols)
    sr, sc = grid.scale
    scaled = (sr, sc) != (1, 1)
    t = Text(f"keep mask of batch {batch} (length {lengths[batch]}; "
             f"{on} = may attend, {off} = masked"
             + (f", {glyphs.partial} = partly; each cell = {sr}x{sc}" if scaled else "")
             + "):\n", style="dim")
    width = 2 if grid.shape[1] <= MAX_PICTURE_COLS // 2 or not scaled else 1
    for i, row in enumerate(grid.cells):
        t.append(f"{i * sr:>3} ", style="dim")
        t.append("".join((on if x >= 1.0 - 1e-9 else off if x <= 1e-9 else glyphs.partial)
                         * width for x in row))
        t.append("\n")
    t.rstrip()
    return t
