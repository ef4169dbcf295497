"""`maskcheck simulate --seq 5 --pad 3`: build the right masks, run them, run the mistakes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from maskcheck.commands.options import parse_format

_OPT = typer.Option


def simulate_command(
    seq: int = _OPT(5, "--seq", metavar="N", help="Sequence length (queries = keys)."),
    pad: int = _OPT(0, "--pad", metavar="N",
                    help="Padding tokens in sequences 1.. (sequence 0 is full)."),
    batch: int = _OPT(2, "--batch", metavar="N", help="Sequences in the batch."),
    padding_side: str = _OPT("right", "--padding-side", metavar="SIDE", help="left or right."),
    causal: bool = _OPT(False, "--causal", help="Causal (decoder) attention."),
    window: int | None = _OPT(None, "--window", metavar="W", help="Sliding window of W keys."),
    block: int | None = _OPT(None, "--block", metavar="B",
                             help="Block-diagonal blocks of B tokens."),
    heads: int = _OPT(2, "--heads", metavar="N", help="Attention heads."),
    dim: int = _OPT(8, "--dim", metavar="N", help="Head dimension."),
    dtype: str = _OPT("float32", "--dtype", metavar="DTYPE",
                      help="float16|bfloat16|float32|float64."),
    device: str = _OPT("cpu", "--device", metavar="DEVICE", help="cpu|cuda|mps|auto."),
    mask_value: str = _OPT("-inf", "--mask-value", metavar="VALUE",
                           help="Masked value of additive masks: -inf, finfo or a number."),
    api: str = _OPT("all", "--api", metavar="API",
                    help="all|mha|sdpa|sdpa-additive|hf|eager."),
    mistake: str = _OPT("all", "--mistake", metavar="NAME",
                        help="all|none|mha-mask-into-sdpa|hf-mask-into-mha|float01-into-sdpa|"
                             "fp16-minus-1e9|summed-finfo-min."),
    output_format: str = _OPT("text", "--format", metavar="FORMAT", help="text or json."),
    fail_on: str = _OPT("error", "--fail-on", metavar="SEVERITY",
                        help="Fail at: error|warning|info (findings of the right masks)."),
    svg: Path | None = _OPT(None, "--svg", metavar="PATH",  # noqa: B008
                            help="Also save the report as SVG."),
    html: Path | None = _OPT(None, "--html", metavar="PATH",  # noqa: B008
                             help="Also save the report as HTML."),
    width: int | None = _OPT(None, "--width", min=20, metavar="N",
                             help="Render for N columns."),
) -> int:
    """Build the masks for a described batch, run real attention calls, show what each does.

    Exit 1 when a right mask cannot be built or its run has a finding at --fail-on or above
    (MC002 rows with no key, MC062 paths that disagree, MC063 leaks); the common mistakes are
    demonstrations and never fail the command.
    """
    from maskcheck.attention.sim_spec import BatchSpec, check_choices
    from maskcheck.commands.options import parse_float_dtype
    from maskcheck.selection import parse_severity

    # Every option is checked before torch is imported (a typo costs no torch start-up).
    fmt = parse_format(output_format)
    severity = parse_severity(fail_on)
    picked = parse_float_dtype(dtype, allowed=("float16", "bfloat16", "float32", "float64"))
    api, mistake = api.strip().lower(), mistake.strip().lower()
    check_choices(api, mistake)
    spec = BatchSpec(seq=seq, pad=pad, batch=batch, padding_side=padding_side.strip().lower(),
                     causal=causal, window=window, block=block, heads=heads, dim=dim,
                     dtype=picked or "float32", device=device, mask_value=mask_value)
    spec.validate()
    from maskcheck.attention.simulate import simulate, to_json

    sim = simulate(spec, api=api, mistake=mistake)
    code = exit_code(sim, severity)
    if fmt == "json":
        from maskcheck import __version__

        doc = {"schema": 1, "tool": {"name": "maskcheck", "version": __version__},
               "simulate": to_json(sim)}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return code
    _print_text(sim, api=api, width=width, svg=svg, html=html)
    return code


def exit_code(sim: Any, fail_on: Any) -> int:
    """1 when a right mask could not be built (torch refused it, e.g. -1e9 in float16) or
    its run has a finding at `fail_on` or above, else 0."""
    findings = [f for s in sim.scenarios for f in s.findings]
    refused = any(s.error for s in sim.scenarios)
    return 1 if refused or any(f.severity.at_least(fail_on) for f in findings) else 0


def _views(scenario: Any, batch: int) -> Any:
    from maskcheck.attention.simulate import path_weights
    from maskcheck.render.attention_report import PathView, ScenarioView

    views = []
    hidden = None
    if scenario.result is not None:
        for p in scenario.result.paths:
            views.append(PathView(p.run, dict(p.classes), path_weights(p, batch, 0)))
        ref = scenario.result.ref
        if ref is not None:
            h = ref.hidden
            h = h[min(batch, h.shape[0] - 1), 0] if h.dim() == 4 else h
            hidden = [[bool(x) for x in row] for row in h.tolist()]
    return ScenarioView(scenario.name, scenario.title, scenario.code, views, scenario.findings,
                        scenario.verdict, scenario.error, hidden)


def _print_text(sim: Any, *, api: str, width: int | None, svg: Path | None,
                html: Path | None) -> None:
    from rich.text import Text

    from maskcheck.commands.replay import emit_text
    from maskcheck.render.attention_report import keep_picture, render_simulation
    from maskcheck.render.console import make_console, no_color_requested, unicode_ok

    console = make_console(width=width)
    w = console.width
    uni = unicode_ok(console)
    color = console.is_terminal and not no_color_requested()
    spec = sim.spec
    batch = spec.batch - 1 if spec.pad else 0
    header = Text()
    header.append("maskcheck simulate", style="bold")
    desc = [f"batch {spec.batch}", f"seq {spec.seq}", f"pad {spec.pad} ({spec.padding_side})"]
    desc += [x for x in ("causal" if spec.causal else "",
                         f"window {spec.window}" if spec.window else "",
                         f"block {spec.block}" if spec.block else "") if x]
    header.append("\n" + ", ".join(desc))
    header.append(f"\n{spec.heads} heads x dim {spec.dim}, {spec.dtype} on {spec.device}, "
                  f"torch {sim.torch_version}, seeded q/k/v")
    header.append("\nrows are (batch, head, query) for SDPA, (batch, query) for MHA; every "
                  "result below was measured on this torch", style="dim")
    pic = keep_picture(sim.keep.tolist(), sim.lengths, unicode=uni, batch=batch)
    fix_api = "sdpa" if api in ("all", "sdpa-additive") else api
    renderable = render_simulation(
        header, pic, [_views(s, batch) for s in sim.scenarios],
        [_views(s, batch) for s in sim.mistakes], sim.fix_code, fix_api, width=w, unicode=uni,
        color=color, batch=batch)
    emit_text(renderable, width=width, svg=svg, html=html, title="maskcheck simulate")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)
