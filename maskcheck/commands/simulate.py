"""`maskcheck simulate --seq 5 --pad 3`: build the right masks, run them, run the mistakes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from maskcheck.commands.options import parse_format


def simulate_command(
    seq: int = typer.Option(5, "--seq", help="Sequence length (queries = keys)."),
    pad: int = typer.Option(0, "--pad", help="Padding tokens in sequences 1.. (sequence 0 is full)."),  # noqa: E501
    batch: int = typer.Option(2, "--batch", help="Sequences in the batch."),
    padding_side: str = typer.Option("right", "--padding-side", help="left or right."),
    causal: bool = typer.Option(False, "--causal", help="Causal (decoder) attention."),
    window: int | None = typer.Option(None, "--window", help="Sliding window of W keys."),
    block: int | None = typer.Option(None, "--block", help="Block-diagonal blocks of B tokens."),
    heads: int = typer.Option(2, "--heads", help="Attention heads."),
    dim: int = typer.Option(8, "--dim", help="Head dimension."),
    dtype: str = typer.Option("float32", "--dtype", help="float16|bfloat16|float32|float64."),
    device: str = typer.Option("cpu", "--device", help="cpu|cuda|mps|auto."),
    mask_value: str = typer.Option("-inf", "--mask-value", help="Masked value of additive masks: -inf, finfo or a number."),  # noqa: E501
    api: str = typer.Option("all", "--api", help="all|mha|sdpa|sdpa-additive|hf|eager."),
    mistake: str = typer.Option("all", "--mistake", help="all|none|mha-mask-into-sdpa|hf-mask-into-mha|float01-into-sdpa|fp16-minus-1e9|summed-finfo-min."),  # noqa: E501
    output_format: str = typer.Option("text", "--format", help="text or json."),
    svg: Path | None = typer.Option(None, "--svg", help="Also save the report as SVG."),  # noqa: B008
    html: Path | None = typer.Option(None, "--html", help="Also save the report as HTML."),  # noqa: B008
    width: int | None = typer.Option(None, "--width", min=20, help="Render for this many columns."),
) -> int:
    """Build the masks for a described batch, run real attention calls, show what each does."""
    fmt = parse_format(output_format)
    from maskcheck.attention.replay import resolve_dtype
    from maskcheck.attention.simulate import BatchSpec, simulate, to_json

    dt = resolve_dtype(dtype)
    spec = BatchSpec(seq=seq, pad=pad, batch=batch, padding_side=padding_side.strip().lower(),
                     causal=causal, window=window, block=block, heads=heads, dim=dim,
                     dtype=str(dt).removeprefix("torch."), device=device,
                     mask_value=mask_value)
    sim = simulate(spec, api=api.strip().lower(), mistake=mistake.strip().lower())
    if fmt == "json":
        from maskcheck import __version__

        doc = {"schema": 1, "tool": {"name": "maskcheck", "version": __version__},
               "simulate": to_json(sim)}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return 0
    _print_text(sim, api=api.strip().lower(), width=width, svg=svg, html=html)
    return 0


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
