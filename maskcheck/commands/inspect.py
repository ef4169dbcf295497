"""`maskcheck inspect PATH...`: what every saved mask is and what is wrong with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

from maskcheck.commands.declare import Arg, Opt, typer_command
from maskcheck.commands.options import parse_api, parse_float_dtype, parse_format
from maskcheck.model import Report
from maskcheck.selection import Selection, parse_severity

# No Typer here: `maskcheck inspect` parses these with argparse (see commands/declare.py).
# str, not Path, for PATH: Typer's Path type refuses an unreadable file as a usage error
# before any file is inspected; the loaders report it as one line and check the others.
PathsArg = Annotated[list[str], Arg(
    metavar="PATH", help="Mask files (.safetensors .pt .pth .bin .npy .npz) or directories.")]
KeyOpt = Annotated[list[str], Opt(
    "--key", "-k", metavar="GLOB", help="Only tensors whose name matches (repeatable).")]
ApiOpt = Annotated[str, Opt("--api", metavar="API",
                            help="Target API: mha|sdpa|hf|eager|flex|auto.")]
DtypeOpt = Annotated[str | None, Opt(
    "--dtype", metavar="DTYPE", help="The query dtype the masks meet (float16, bfloat16, ...).")]
FormatOpt = Annotated[str, Opt("--format", metavar="FORMAT", help="text or json.")]
FailOnOpt = Annotated[str, Opt("--fail-on", metavar="SEVERITY",
                               help="Fail at: error|warning|info.")]
SelectOpt = Annotated[list[str], Opt("--select", metavar="CODES",
                                     help="Only these rules (codes, names).")]
IgnoreOpt = Annotated[list[str], Opt("--ignore", metavar="CODES",
                                     help="Skip these rules (codes, names).")]
JobsOpt = Annotated[int | None, Opt(
    "--jobs", "-j", min=1, metavar="N",
    help="Files analysed in parallel (at most the CPUs this process may use).")]
SvgOpt = Annotated[Path | None, Opt("--svg", metavar="PATH", help="Also save the report as SVG.")]
HtmlOpt = Annotated[Path | None, Opt("--html", metavar="PATH",
                                     help="Also save the report as HTML.")]
NoPictureOpt = Annotated[bool, Opt("--no-picture", help="Leave out the mask pictures.")]
WidthOpt = Annotated[int | None, Opt("--width", min=20, metavar="N", help="Render for N columns.")]


def inspect_command(
    paths: PathsArg,
    key: KeyOpt = [],  # noqa: B006 (never mutated)
    api: ApiOpt = "auto",
    dtype: DtypeOpt = None,
    output_format: FormatOpt = "text",
    fail_on: FailOnOpt = "error",
    select: SelectOpt = [],  # noqa: B006
    ignore: IgnoreOpt = [],  # noqa: B006
    jobs: JobsOpt = None,
    svg: SvgOpt = None,
    html: HtmlOpt = None,
    no_picture: NoPictureOpt = False,
    width: WidthOpt = None,
) -> int:
    """Load every tensor in the files, say what each mask is and what is wrong with it."""
    fmt = parse_format(output_format)
    severity = parse_severity(fail_on)
    selection = Selection.build(select, ignore)
    report = _analyze(
        list(paths),
        keys=list(key) or None,
        api=parse_api(api),
        query_dtype=parse_float_dtype(dtype),
        selection=selection,
        jobs=jobs,
        show_progress=fmt == "text",
    )
    if fmt == "json":
        from maskcheck import __version__

        sys.stdout.write(json.dumps(report.to_json(__version__), indent=2) + "\n")
    else:
        _print_text(report, width=width, picture=not no_picture, svg=svg, html=html)
    return report.exit_code(severity)


def _analyze(
    paths: list[str],
    *,
    keys: list[str] | None,
    api: str,
    query_dtype: str | None,
    selection: Selection,
    jobs: int | None,
    show_progress: bool,
) -> Report:
    from maskcheck.analysis import analyze_paths
    from maskcheck.render.console import progress_bar

    with progress_bar(enabled=show_progress) as on_progress:
        return analyze_paths(paths, keys=keys, api=api, query_dtype=query_dtype,
                             selection=selection, jobs=jobs, progress=on_progress)


def _print_text(
    report: Report, *, width: int | None, picture: bool, svg: Path | None, html: Path | None
) -> None:
    from maskcheck.render.console import (
        make_console,
        no_color_requested,
        print_clean,
        save_recording,
        unicode_ok,
    )
    from maskcheck.render.rich_report import RenderOptions, report_parts

    console = make_console(width=width)
    opts = RenderOptions(width=console.width, picture=picture, unicode=unicode_ok(console),
                         highlight=console.is_terminal and not no_color_requested())
    print_clean(console, report_parts(report, opts))
    if svg is not None or html is not None:
        recorded = report_parts(report, RenderOptions(width=console.width, picture=picture))
        save_recording(recorded, width=console.width, svg=svg, html=html,
                       title="maskcheck inspect")


def register(app: Any) -> None:
    app.command("inspect")(typer_command(inspect_command))
