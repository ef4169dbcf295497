"""`maskcheck replay FILE`: run a saved attention call on every path and say what each did."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from maskcheck.commands.options import parse_api, parse_device, parse_float_dtype, parse_format
from maskcheck.model import Report
from maskcheck.selection import Selection, parse_severity

_REPLAY_APIS = ("auto", "sdpa", "mha", "hf", "eager", "manual")


def path_views(paths: Any) -> list[Any]:
    from maskcheck.render.attention_report import PathView

    return [PathView(p.run, dict(p.classes)) for p in paths.paths]


def emit_text(renderable: Any, *, width: int | None, svg: Path | None, html: Path | None,
              title: str) -> None:
    from maskcheck.render.console import make_console, print_clean, save_recording

    console = make_console(width=width)
    print_clean(console, renderable)
    save_recording(renderable, width=console.width, svg=svg, html=html, title=title)


def replay_command(
    path: str = typer.Argument(..., metavar="PATH",
                               help="A capture file (maskcheck.capture) or a mask file."),
    device: str = typer.Option("cpu", "--device", help="cpu|cuda|mps|auto."),
    dtype: str | None = typer.Option(None, "--dtype", help="Cast q/k/v and float masks to this dtype."),  # noqa: E501
    api: str = typer.Option("auto", "--api", help="auto|sdpa|mha|hf|eager|manual (mask files: how to read the mask)."),  # noqa: E501
    heads: int = typer.Option(2, "--heads", min=1, help="Heads of generated q/k/v (mask files)."),
    dim: int = typer.Option(8, "--dim", min=1, help="Head dim of generated q/k/v (mask files)."),
    output_format: str = typer.Option("text", "--format", help="text or json."),
    fail_on: str = typer.Option("error", "--fail-on", help="Lowest severity that fails: error|warning|info."),  # noqa: E501
    select: list[str] = typer.Option([], "--select", help="Only these rule codes/prefixes/names."),  # noqa: B008
    ignore: list[str] = typer.Option([], "--ignore", help="Skip these rule codes/prefixes/names."),  # noqa: B008
    svg: Path | None = typer.Option(None, "--svg", help="Also save the text report as SVG."),  # noqa: B008
    html: Path | None = typer.Option(None, "--html", help="Also save the text report as HTML."),  # noqa: B008
    width: int | None = typer.Option(None, "--width", min=20, help="Render for this many columns."),
) -> int:
    """Run a saved attention call on every SDPA backend / MHA path and the float64 reference."""
    # Every option is checked before torch is imported (2-3 s to reject a typo otherwise).
    fmt = parse_format(output_format)
    parse_api(api, _REPLAY_APIS)
    parse_device(device)
    dtype = parse_float_dtype(dtype, allowed=("float16", "bfloat16", "float32", "float64"))
    severity = parse_severity(fail_on)
    selection = Selection.build(select, ignore)
    from maskcheck.attention.replay import replay_file
    from maskcheck.errors import FileProblem

    try:
        result = replay_file(str(path), device=device, dtype=dtype, api=api.strip().lower(),
                             heads=heads, dim=dim, selection=selection)
    except FileProblem as e:
        if fmt != "json":
            raise
        from maskcheck import __version__
        from maskcheck.model import FileReport

        print(f"maskcheck: error: {e}", file=sys.stderr)
        failed = Report([FileReport(path=str(path), error=e.problem, runs=[])])
        sys.stdout.write(json.dumps(failed.to_json(__version__), indent=2) + "\n")
        return 2
    report = Report([result.report])
    if fmt == "json":
        from maskcheck import __version__

        doc = report.to_json(__version__)
        doc["files"][0]["replay"] = _jsonable(result.info)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from maskcheck.render.attention_report import render_replay
        from maskcheck.render.console import make_console

        w = width or make_console().width
        emit_text(render_replay(result.report, path_views(result.paths), result.info, width=w),
                  width=width, svg=svg, html=html, title="maskcheck replay")
    return report.exit_code(severity)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)
