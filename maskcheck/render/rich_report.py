"""The text report of `maskcheck inspect`: per file a tensor table, then per mask its evidence,
picture and findings (errors first), then the totals."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from maskcheck.errors import one_line
from maskcheck.model import FileReport, Finding, Index, Report, Severity, TensorReport
from maskcheck.render.picture import render_picture

SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "bold blue",
}
_SEVERITY_ORDER = (Severity.ERROR, Severity.WARNING, Severity.INFO)
_PLURAL = {"batch": "batches", "matrix": "matrices"}
_MAX_PADDING_SHOWN = 8
_MAX_PADDING_LISTED = 64
_INDENT = 2


@dataclass(frozen=True)
class RenderOptions:
    width: int = 100
    picture: bool = True
    unicode: bool = True
    picture_rows: int = 32
    # Syntax-highlight code in fixes: only worth pygments' start-up (a tenth of a second of
    # lexer regexes) where the colours are seen.
    highlight: bool = True


# ------------------------------------------------------------------------ formatting helpers


def compress_ranges(values: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    nums = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(parts)


def dim_names(shape: Sequence[int], role: str) -> list[str]:
    ndim = len(shape)
    if ndim == 1:
        return ["key"]
    if ndim == 2:
        if role in ("key_padding_mask", "hf_attention_mask"):
            return ["sequence", "key"]
        return ["row", "col"]
    if ndim == 3:
        return ["matrix", "row", "col"]
    if ndim == 4:
        return ["batch", "head", "row", "col"]
    return [f"dim{i}" for i in range(ndim - 2)] + ["row", "col"]


def _plural(name: str) -> str:
    return _PLURAL.get(name, name + "s")


def format_where(where: Sequence[Index], shape: Sequence[int], role: str) -> str:
    """Index tuples as words, size-1 dims left out: 'batch 1 rows 0-2; batch 3 row 5'."""
    if not where:
        return ""
    names = dim_names(shape, role)
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    last_name = ""
    for idx in where:
        named = [
            (names[d], v)
            for d, v in enumerate(idx)
            if d < len(shape) and d < len(names) and shape[d] != 1
        ]
        if not named:
            continue
        last_name = named[-1][0]
        groups.setdefault(tuple(named[:-1]), []).append(named[-1][1])
    parts = []
    for prefix, lasts in groups.items():
        head = " ".join(f"{n} {v}" for n, v in prefix)
        label = last_name if len(set(lasts)) == 1 else _plural(last_name)
        parts.append(f"{head} {label} {compress_ranges(lasts)}".strip())
    text = "; ".join(parts)
    return text + ", ..." if len(where) >= 20 else text


def padding_lengths(params: dict[str, Any]) -> list[str]:
    out = []
    for seq in params.get("padding") or []:
        if not isinstance(seq, dict):
            continue
        if seq.get("all"):
            out.append("all")
            continue
        left, right = int(seq.get("left", 0)), int(seq.get("right", 0))
        out.append(f"{left}+{right}" if left and right else str(left or right))
    return out


def _padding_text(params: dict[str, Any]) -> str:
    lengths = padding_lengths(params)
    if not lengths:
        return ""
    shown = ",".join(lengths[:_MAX_PADDING_SHOWN])
    if len(lengths) > _MAX_PADDING_SHOWN:
        shown += f",... {len(lengths)} seqs"
    return f" (pad {shown})"


def _tag_text(tag: str, params: dict[str, Any]) -> str:
    if tag == "sliding-window" and "window" in params:
        extra = ""
        if params.get("window_forward"):
            extra = f", back={params.get('window_back')}, fwd={params['window_forward']}"
        return f"sliding-window (window={params['window']}{extra})"
    if tag == "block-diagonal":
        if "block" in params:
            inner = f"block={params['block']}"
        elif "block_sizes" in params:
            sizes = list(params["block_sizes"])
            more = ",..." if len(sizes) > 6 else ""
            inner = "blocks=" + ",".join(str(s) for s in sizes[:6]) + more
        else:
            inner = f"blocks={params.get('blocks', '?')}"
        if params.get("causal_within_blocks"):
            inner += ", causal within"
        return f"block-diagonal ({inner})"
    if tag in ("padding-left", "padding-right"):
        return tag + _padding_text(params)
    if tag == "custom" and params.get("everything_masked"):
        return "custom (everything masked)"
    return tag


def pattern_text(report: TensorReport) -> str:
    if report.convention == "not-a-mask":
        return ""
    return ", ".join(_tag_text(t, report.params) for t in report.pattern)


def masked_text(fraction: float | None) -> str:
    if fraction is None:
        return ""
    pct = fraction * 100
    if 0 < pct < 0.1:
        return "<0.1%"
    if 99.9 < pct < 100:
        return ">99.9%"
    return f"{pct:.1f}%" if pct % 1 else f"{pct:.0f}%"


def convention_text(report: TensorReport) -> Text:
    if report.convention == "not-a-mask":
        return Text("not-a-mask", style="dim")
    conf = report.confidence
    style = "green" if conf >= 0.8 else "yellow" if conf >= 0.5 else "red"
    return Text.assemble(report.convention, " ", (f"{conf:.2f}", style))


# A fix like "out = out.masked_fill(...)" or "harmless on ...: out = ..." ends in code.
_CODE_START = re.compile(r"^[~\w.\[\]]*[\w\]](\s=\s|\()")


def looks_like_code(text: str) -> bool:
    return bool(_CODE_START.match(text)) and "'s " not in text


def fix_text(fix: str, unicode: bool, highlight: bool = True) -> Text:
    """The fix with its code part syntax-highlighted and the prose around it left plain."""
    if not highlight:
        return Text(fix)
    from rich.syntax import Syntax

    prose, code = "", fix
    if not looks_like_code(fix):
        head, sep, tail = fix.rpartition(": ")
        if sep and looks_like_code(tail):
            prose, code = head + sep, tail
        else:
            return Text(fix)
    out = Text(prose)
    highlighted = Syntax(code, "python", theme="ansi_dark", background_color="default")
    body = highlighted.highlight(code)
    body.rstrip()
    out.append_text(body)
    return out


# ------------------------------------------------------------------------ renderables


_COLUMNS = ("tensor", "type", "convention", "role", "pattern", "masked")
# Columns that may fold, and how narrow they may get; the others stay on one line.
_FOLD_MIN = {"pattern": 12, "tensor": 12}  # narrowed in this order
_NAME_KEPT_WHOLE = 24


def type_text(t: TensorReport) -> str:
    """lovely-tensors style: bool[2,1,6,6]."""
    return f"{t.dtype}[{','.join(str(s) for s in t.shape)}]"


def _row_cells(t: TensorReport) -> list[Text]:
    dim = t.convention == "not-a-mask"
    return [
        Text(t.name, style="dim" if dim else "bold"),
        Text(type_text(t)),
        convention_text(t),
        Text("" if dim else t.role, style="dim" if t.role == "unknown" else ""),
        Text(pattern_text(t)),
        Text("" if dim else masked_text(t.masked_fraction)),
    ]


def _column_widths(rows: list[list[Text]], width: int) -> list[int] | None:
    """Natural widths, with the foldable columns narrowed to fit; None when nothing fits."""
    widths = [len(c) for c in _COLUMNS]
    for cells in rows:
        widths = [max(w, c.cell_len) for w, c in zip(widths, cells, strict=True)]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    for name, least in _FOLD_MIN.items():
        i = _COLUMNS.index(name)
        if name == "pattern":  # fold between words, never inside a tag
            least = max([least] + [len(w) for c in rows for w in c[i].plain.split()])
        else:  # break only names too long to keep whole
            least = max(least, min(widths[i], _NAME_KEPT_WHOLE))
        cut = min(max(0, excess), max(0, widths[i] - least))
        widths[i] -= cut
        excess -= cut
    return widths if excess <= 0 else None


def tensor_table(tensors: Sequence[TensorReport], opts: RenderOptions) -> RenderableType:
    """A table when it fits the width (names and patterns may fold), else a block per tensor."""
    rows = [_row_cells(t) for t in tensors]
    widths = _column_widths(rows, opts.width)
    if widths is None:
        return Group(*(_tensor_lines(t) for t in tensors))
    table = Table(
        box=box.SIMPLE_HEAD if opts.unicode else box.ASCII2,
        show_edge=False,
        pad_edge=False,
        header_style="bold dim",
        expand=False,
        padding=(0, 1, 0, 0),
    )
    for name, w in zip(_COLUMNS, widths, strict=True):
        table.add_column(
            name,
            justify="right" if name == "masked" else "left",
            no_wrap=name not in _FOLD_MIN,
            overflow="fold",
            width=w,
        )
    for t, cells in zip(tensors, rows, strict=True):
        table.add_row(*cells, style="dim" if t.convention == "not-a-mask" else None)
    return table


def _tensor_lines(t: TensorReport) -> Text:
    """The narrow-terminal form of one table row."""
    text = Text()
    text.append(t.name, style="dim" if t.convention == "not-a-mask" else "bold")
    text.append(f" {type_text(t)}", style="dim")
    text.append("\n  ")
    text.append_text(convention_text(t))
    if t.convention != "not-a-mask":
        text.append(f"  {t.role}")
        if t.pattern:
            text.append(f"\n  {pattern_text(t)}")
        text.append(f"  {masked_text(t.masked_fraction)} masked", style="dim")
    return text


def finding_block(
    f: Finding, shape: Sequence[int], role: str, opts: RenderOptions, *, in_tensor: bool = False
) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=7, no_wrap=True)
    grid.add_column(overflow="fold")
    head = Text()
    head.append(f.code, style="bold")
    head.append(f" {f.name}")
    location = _location(f, shape, role, name_tensor=not in_tensor)
    if location:
        head.append(f"  {location}", style="cyan")
    grid.add_row(Text(f.severity.value, style=SEVERITY_STYLE[f.severity]), head)
    grid.add_row("", Text(f.message))
    if f.fix:
        fix = fix_text(f.fix, opts.unicode, opts.highlight)
        grid.add_row("", Text.assemble(("fix ", "bold green"), fix))
    return grid


def _location(f: Finding, shape: Sequence[int], role: str, *, name_tensor: bool) -> str:
    parts = []
    if f.line is not None:
        parts.append(f"line {f.line}:{f.col or 0}")
    if f.tensor and name_tensor:
        parts.append(f.tensor)
    where = format_where(f.where, shape, role) if shape else ""
    if where:
        parts.append(where)
    return "  ".join(parts)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    order = {s: i for i, s in enumerate(_SEVERITY_ORDER)}
    return sorted(findings, key=lambda f: (order[f.severity], f.code))


def tensor_section(t: TensorReport, opts: RenderOptions) -> RenderableType:
    parts: list[RenderableType] = [Text(t.name, style="bold")]
    body: list[RenderableType] = []
    if t.evidence:
        body.append(Text("; ".join(t.evidence), style="dim"))
    if opts.picture:
        picture = render_picture(
            t,
            max_width=opts.width - 2 * _INDENT,
            max_rows=opts.picture_rows,
            unicode=opts.unicode,
        )
        if picture is not None:
            body.append(picture)
    lengths = padding_lengths(t.params)
    if lengths and len(lengths) > 1:
        side = t.params.get("padding_side", "")
        shown = ", ".join(lengths[:_MAX_PADDING_LISTED])
        if len(lengths) > _MAX_PADDING_LISTED:
            shown += f", ... ({len(lengths)} sequences)"
        body.append(Text(f"padded keys per sequence ({side}): {shown}", style="dim"))
    for f in sorted_findings(t.findings):
        body.append(finding_block(f, t.shape, t.role, opts, in_tensor=True))
    if not t.findings:
        body.append(Text("no findings", style="green"))
    parts.append(Padding(Group(*body), (0, 0, 0, _INDENT), expand=False))
    return Group(*parts)


def file_header(fr: FileReport) -> Text:
    text = Text(no_wrap=True, overflow="ignore")  # a path is never broken across lines
    text.append(one_line(fr.path), style="bold underline")
    if fr.error is None:
        n = len(fr.tensors)
        details = [f"{n} tensor" + ("" if n == 1 else "s")]
        if fr.metadata:
            k = len(fr.metadata)
            details.append(f"{k} metadata key" + ("" if k == 1 else "s"))
        text.append("  " + ", ".join(details), style="dim")
    return text


def render_file(fr: FileReport, opts: RenderOptions) -> list[RenderableType]:
    if fr.error is not None:
        # One line, whatever the width: scripts and users grep for "path: problem".
        return [Text.assemble((one_line(fr.path), "bold red"), (f": {one_line(fr.error)}", "red"),
                              no_wrap=True, overflow="ignore")]
    parts: list[RenderableType] = [file_header(fr)]
    if fr.tensors:
        parts.append(tensor_table(fr.tensors, opts))
    for t in fr.tensors:
        if t.convention != "not-a-mask":
            parts.append(Text())
            parts.append(Padding(tensor_section(t, opts), (0, 0, 0, _INDENT), expand=False))
    if fr.findings:
        parts.append(Text())
        parts.append(Padding(Text("file", style="bold"), (0, 0, 0, _INDENT), expand=False))
        blocks = [finding_block(f, (), "unknown", opts) for f in sorted_findings(fr.findings)]
        parts.append(Padding(Group(*blocks), (0, 0, 0, 2 * _INDENT), expand=False))
    return parts


def _count(n: int, word: str, style: str) -> Text:
    label = f"{n} {word}" + ("" if n == 1 else "s")
    return Text(label, style=style if n else "dim")


def totals(report: Report) -> Text:
    counts = report.counts()
    n_tensors = sum(len(f.tensors) for f in report.files)
    text = Text()
    text.append_text(_count(len(report.files), "file", ""))
    text.append(", ")
    text.append_text(_count(n_tensors, "tensor", ""))
    text.append(": ")
    text.append_text(_count(counts["error"], "error", "bold red"))
    text.append(", ")
    text.append_text(_count(counts["warning"], "warning", "bold yellow"))
    text.append(", ")
    text.append_text(_count(counts["info"], "info", "bold blue"))
    if report.unreadable:
        text.append(", ")
        text.append_text(_count(report.unreadable, "unreadable file", "bold red"))
    return text


def report_parts(report: Report, opts: RenderOptions | None = None) -> list[RenderableType]:
    """Top-level pieces; one-line Texts (no_wrap, overflow="ignore") must not be wrapped."""
    opts = opts or RenderOptions()
    parts: list[RenderableType] = []
    for fr in report.files:
        parts.extend(render_file(fr, opts))
        parts.append(Text())
    parts.append(totals(report))
    return parts


def render_report(report: Report, opts: RenderOptions | None = None) -> Group:
    return Group(*report_parts(report, opts))
