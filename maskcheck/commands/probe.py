"""`maskcheck probe TARGET --causal`: test a module or model for mask bugs by its outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from maskcheck.commands.options import parse_choice, parse_format
from maskcheck.errors import UsageError
from maskcheck.selection import Selection, parse_severity

_DTYPES = ("float32", "float16", "bfloat16")


def probe_command(
    target: str = typer.Argument(..., help="file.py:FACTORY, package.module:FACTORY, hf:MODEL_TYPE or hf:PATH."),  # noqa: E501
    causal: bool = typer.Option(False, "--causal", help="A real position may depend only on real positions at or before it."),  # noqa: E501
    bidirectional: bool = typer.Option(False, "--bidirectional", help="A real position may depend on every real position of its sequence."),  # noqa: E501
    window: int | None = typer.Option(None, "--window", help="Narrow the intent to positions within W of each other (W keys for causal)."),  # noqa: E501
    seq: int = typer.Option(8, "--seq", help="Sequence length L of the probe batch."),
    batch: int = typer.Option(3, "--batch", help="Sequences in the probe batch."),
    pad: int = typer.Option(2, "--pad", help="Most padding of a sequence (amounts differ per sequence)."),  # noqa: E501
    padding_side: str = typer.Option("both", "--padding-side", help="left|right|both."),
    positions: int | None = typer.Option(None, "--positions", help="Perturb only this many key positions per sequence (spread evenly; default all L)."),  # noqa: E501
    dtype: str = typer.Option("float32", "--dtype", help="float32|float16|bfloat16."),
    device: str = typer.Option("cpu", "--device", help="Device to run the target on."),
    seed: int = typer.Option(0, "--seed", help="Seed of the probe content."),
    output_format: str = typer.Option("text", "--format", help="text or json."),
    fail_on: str = typer.Option("error", "--fail-on", help="Lowest severity that fails: error|warning|info."),  # noqa: E501
    select: list[str] = typer.Option([], "--select", help="Only these rule codes/prefixes/names."),  # noqa: B008
    ignore: list[str] = typer.Option([], "--ignore", help="Skip these rule codes/prefixes/names."),  # noqa: B008
    svg: Path | None = typer.Option(None, "--svg", help="Also save the text report as SVG."),  # noqa: B008
    html: Path | None = typer.Option(None, "--html", help="Also save the text report as HTML."),  # noqa: B008
    width: int | None = typer.Option(None, "--width", min=20, help="Render for this many columns."),
) -> int:
    """Probe a module or model: perturb inputs, watch outputs, report mask bugs (MC070-MC077)."""
    fmt = parse_format(output_format)
    if causal == bidirectional:
        raise UsageError("declare the intent: --causal or --bidirectional (exactly one)")
    dtype_name = parse_choice("--dtype", dtype, _DTYPES)
    side = parse_choice("--padding-side", padding_side, ("left", "right", "both"))
    severity = parse_severity(fail_on)
    selection = Selection.build(select, ignore)
    from maskcheck.probe.runner import ALL_CODES, ProbeOptions, run_probe

    import_torch()
    from maskcheck.probe.intent import Intent

    options = ProbeOptions(Intent("causal" if causal else "bidirectional", window), seq=seq,
                           batch=batch, pad=pad, padding_side=side, dtype=dtype_name,
                           device=device, seed=seed, positions=positions,
                           codes=frozenset(c for c in ALL_CODES if selection.allows(c)))
    options.validate()
    report = run_probe(target, options)
    if fmt == "json":
        from maskcheck import __version__

        sys.stdout.write(json.dumps(report.to_json(__version__), indent=2) + "\n")
    else:
        from maskcheck.commands.replay import emit_text
        from maskcheck.render.console import make_console, unicode_ok
        from maskcheck.render.probe_report import render_probe

        console = make_console(width=width)
        emit_text(render_probe(report, width=console.width, unicode=unicode_ok(console)),
                  width=width, svg=svg, html=html, title="maskcheck probe")
    return report.exit_code(severity)


def import_torch() -> None:
    """torch first, so that a missing torch is the one-line usage error, not a target error."""
    import torch  # noqa: F401


def register(app: typer.Typer) -> None:
    app.command("probe")(probe_command)
