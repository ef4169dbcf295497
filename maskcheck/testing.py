"""pytest helpers: assert what `maskcheck probe` checks, from inside a test.

    from maskcheck.testing import assert_causal

    def test_my_attention_is_causal():
        assert_causal(MyAttention(embed_dim=16))

Each helper probes the target (a module, a callable f(x, keep), or a target string such as
"hf:llama") for its rules only and raises AssertionError with the probe's text report when
one of them fails. Options are those of `maskcheck.probe` (seq, batch, pad, padding_side,
dtype, device, seed, positions, window). Needs torch.
"""

from __future__ import annotations

from typing import Any

from maskcheck.probe.report import ProbeReport

__all__ = [
    "assert_batch_isolated",
    "assert_causal",
    "assert_no_nan_on_boundaries",
    "assert_padding_invariant",
    "probe_text",
]


def probe_text(report: ProbeReport, width: int = 100) -> str:
    """The probe's text report (as `maskcheck probe` prints it), without colour."""
    import io

    from rich.console import Console

    from maskcheck.render.console import print_parts
    from maskcheck.render.probe_report import render_probe

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, no_color=True,
                      highlight=False, emoji=False, markup=False)
    print_parts(console, render_probe(report, width=width))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def _assert(target: Any, intent: str, codes: str, options: dict[str, Any]) -> ProbeReport:
    from maskcheck.probe.runner import probe

    report = probe(target, intent, select=[codes], **options)
    failed = [c for c in report.checks if c.status in ("fail", "error")]
    if failed:
        raise AssertionError("\n" + probe_text(report))
    return report


def assert_causal(target: Any, **options: Any) -> ProbeReport:
    """No output depends on a later real position (MC070), and every earlier real position
    and the position itself do influence it (MC075)."""
    return _assert(target, "causal", "MC070,MC075", options)


def assert_padding_invariant(target: Any, *, causal: bool = False,
                             **options: Any) -> ProbeReport:
    """Pad content (MC071) and the amount and side of padding (MC072) change no real output.
    `causal` only names the intent; these two rules do not depend on it."""
    return _assert(target, "causal" if causal else "bidirectional", "MC071,MC072", options)


def assert_batch_isolated(target: Any, **options: Any) -> ProbeReport:
    """No sequence's real outputs depend on another sequence of the batch (MC073)."""
    return _assert(target, "bidirectional", "MC073", options)


def assert_no_nan_on_boundaries(target: Any, **options: Any) -> ProbeReport:
    """No NaN/inf in a real output, with an all-padding sequence in the batch, a batch of
    one and length 1 included (MC074)."""
    return _assert(target, "bidirectional", "MC074", options)
