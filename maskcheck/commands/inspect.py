"""`maskcheck inspect PATH...`: what every saved mask is and what is wrong with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, get_args

import typer

from maskcheck.errors import UsageError
from maskcheck.model import Api, Report
from maskcheck.selection import Selection, parse_severity

API_CHOICES: tuple[str, ...] = get_args(Api)
FORMATS = ("text", "json")
# Query dtypes by the names people type; values are torch dtype names.
_DTYPE_ALIASES = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64", "f64": "float64",
    "float8_e4m3fn": "float8_e4m3fn", "fp8": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}


def parse_api(value: str) -> str:
    api = value.strip().lower()
    if api not in API_CHOICES:
        raise UsageError(f"--api takes {'|'.join(API_CHOICES)}, not {value!r}")
    return api


def parse_query_dtype(value: str | None) -> str | None:
    if value is None:
        return None
    key = value.strip().lower().removeprefix("torch.")
    if key not in _DTYPE_ALIASES:
        raise UsageError(
            f"--dtype takes a float dtype (float16, bfloat16, float32, float64), not {value!r}"
        )
    return _DTYPE_ALIASES[key]


def parse_format(value: str, choices: tuple[str, ...] = FORMATS) -> str:
    fmt = value.strip().lower()
    if fmt not in choices:
        raise UsageError(f"--format takes {'|'.join(choices)}, not {value!r}")
    return fmt


_OPT = typer.Option
PathsArg = Annotated[list[Path], typer.Argument(
    metavar="PATH", help="Mask files (.safetensors .pt .pth .bin .npy .npz) or directories.")]
KeyOpt = Annotated[list[str], _OPT(
    "--key", "-k", metavar="GLOB", help="Only tensors whose name matches (repeatable).")]
ApiOpt = Annotated[str, _OPT(metavar="API", help="Target API: mha|sdpa|hf|eager|flex|auto.")]
DtypeOpt = Annotated[str | None, _OPT(
    metavar="DTYPE", help="The query dtype the masks meet (float16, bfloat16, ...).")]
FormatOpt = Annotated[str, _OPT("--format", metavar="FORMAT", help="text or json.")]
FailOnOpt = Annotated[str, _OPT(metavar="SEVERITY", help="Fail at: error|warning|info.")]
SelectOpt = Annotated[list[str], _OPT(metavar="CODES", help="Only these rules (codes, names).")]
IgnoreOpt = Annotated[list[str], _OPT(metavar="CODES", help="Skip these rules (codes, names).")]
JobsOpt = Annotated[int | None, _OPT(
    "--jobs", "-j", min=1, metavar="N", help="Files analysed in parallel.")]
SvgOpt = Annotated[Path | None, _OPT(metavar="PATH", help="Also save the report as SVG.")]
HtmlOpt = Annotated[Path | None, _OPT(metavar="PATH", help="Also save the report as HTML.")]
NoPictureOpt = Annotated[bool, _OPT("--no-picture", help="Leave out the mask pictures.")]
WidthOpt = Annotated[int | None, _OPT(min=20, metavar="N", help="Render for N columns.")]


def inspect_command(
    paths: PathsArg,
    key: KeyOpt = [],  # noqa: B006 (typer copies defaults)
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
        [str(p) for p in paths],
        keys=list(key) or None,
        api=parse_api(api),
        query_dtype=parse_query_dtype(dtype),
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
        print_clean,
        print_parts,
        recording_console,
        unicode_ok,
    )
    from maskcheck.render.rich_report import RenderOptions, report_parts

    console = make_console(width=width)
    opts = RenderOptions(width=console.width, picture=picture, unicode=unicode_ok(console))
    print_clean(console, report_parts(report, opts))
    if svg is None and html is None:
        return
    recorder = recording_console(console.width)
    print_parts(recorder, report_parts(report, RenderOptions(width=console.width, picture=picture)))
    try:
        if svg is not None:
            recorder.save_svg(str(svg), title="maskcheck inspect", clear=False)
        if html is not None:
            recorder.save_html(str(html), clear=False)
    except OSError as e:
        raise UsageError(f"cannot write {e.filename}: {e.strerror}") from None


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_command)
