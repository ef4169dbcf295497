"""Rich rendering of `replay` and `simulate` results: per-path table, row outcomes, heatmaps.

Works from plain data (Run, Finding, TensorReport and nested lists of floats); imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from maskcheck.model import FileReport, Finding, Index, Run, Severity, TensorReport
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


def heatmap(matrix: Sequence[Sequence[float]], *, unicode: bool = True,
            hidden: Sequence[Sequence[bool]] | None = None, max_cols: int = 40) -> Text:
    """Weights as shade characters, one per key; NaN as '!', hidden keys underlined."""
    shades = _SHADES if unicode else _ASCII_SHADES
    out = Text()
    for i, row in enumerate(matrix):
        out.append(f"{i:>3} ", style="dim")
        width = 2 if len(row) <= 20 else 1
        for j, w in enumerate(row[:max_cols]):
            style = ""
            if hidden is not None and hidden[i][j]:
                style = "on grey23"
            if isinstance(w, float) and math.isnan(w):
                out.append("!" * width, style="bold red " + style)
                continue
            level = min(len(shades) - 1, max(0, math.ceil(w * (len(shades) - 1) - 1e-9)))
            ch = shades[level] if w > 1e-6 else ("·" if unicode else ".")
            if hidden is not None and hidden[i][j] and w > 1e-3:
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


def code_block(code: str, *, color: bool) -> RenderableType:
    if not color:
        return Text(code)
    return Syntax(code, "python", theme="ansi_dark", background_color="default", word_wrap=True)


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
    parts.append(code_block(s.code, color=color))
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
    parts.append(code_block(fix, color=color))
    return Group(*parts)


def keep_picture(keep: Sequence[Sequence[Sequence[bool]]], lengths: Sequence[int], *,
                 unicode: bool, batch: int) -> RenderableType:
    on, off = ("█", "·") if unicode else ("#", ".")
    t = Text(f"keep mask of batch {batch} (length {lengths[batch]}; "
             f"{on} = may attend, {off} = masked):\n", style="dim")
    for i, row in enumerate(keep[batch]):
        t.append(f"{i:>3} ", style="dim")
        t.append("".join((on if x else off) * 2 for x in row))
        t.append("\n")
    t.rstrip()
    return t
