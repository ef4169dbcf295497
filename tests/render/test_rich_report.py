"""The inspect report rendered to plain strings, from hand-built and from analysed reports."""

from __future__ import annotations

import io
import re

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from maskcheck.analysis import analyze
from maskcheck.model import FileReport, Finding, Report, Severity, TensorReport
from maskcheck.render.console import print_clean
from maskcheck.render.rich_report import (
    RenderOptions,
    compress_ranges,
    fix_text,
    format_where,
    masked_text,
    pattern_text,
    render_report,
    report_parts,
)

ANSI = re.compile(r"\x1b\[")


def render(report: Report, width: int = 100, *, picture: bool = True, unicode: bool = True) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    print_clean(console, report_parts(report, RenderOptions(width, picture, unicode)))
    return buf.getvalue()


def padded_causal(lengths: list[int], side: str = "right") -> np.ndarray:
    """bool-true-keep (N, 1, L, L): causal AND key padding, as SDPA wants it."""
    n, length = len(lengths), max(lengths)
    keep = np.zeros((n, length), bool)
    for i, k in enumerate(lengths):
        if side == "right":
            keep[i, :k] = True
        else:
            keep[i, length - k :] = True
    causal = np.tril(np.ones((length, length), bool))
    return causal[None, None] & keep[:, None, None, :]


def mc002_tensor() -> TensorReport:
    preview = [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    return TensorReport(
        name="attn_mask",
        shape=(2, 1, 3, 3),
        dtype="bool",
        convention="bool-true-keep",
        confidence=0.95,
        role="attn_mask",
        pattern=["custom"],
        masked_fraction=0.5,
        findings=[
            Finding("MC050", "dense-causal-mask", Severity.INFO, "exactly causal"),
            Finding(
                "MC002",
                "fully-masked-row",
                Severity.ERROR,
                "3 query rows with no key to attend",
                where=((0, 0, 1), (1, 0, 0), (1, 0, 1), (1, 0, 2)),
                fix="attn_mask = attn_mask | torch.eye(L, dtype=torch.bool)",
            ),
            Finding("MC042", "scattered-padding", Severity.WARNING, "scattered"),
        ],
        evidence=["bool values", "read with True = kept"],
        preview=preview,
        preview_origin=(0, 0),
    )


def test_compress_ranges() -> None:
    assert compress_ranges([5, 0, 1, 2, 7, 8, 2]) == "0-2, 5, 7-8"
    assert compress_ranges([3]) == "3"
    assert compress_ranges([]) == ""


def test_format_where_groups_by_batch_and_drops_size_one_dims() -> None:
    where = ((1, 0, 0), (1, 0, 1), (1, 0, 2), (3, 0, 5))
    assert format_where(where, (4, 1, 6, 6), "attn_mask") == "batch 1 rows 0-2; batch 3 row 5"
    assert format_where(((16,),), (32, 10), "key_padding_mask") == "sequence 16"
    assert format_where(((0,), (1,)), (4, 4), "attn_mask") == "rows 0-1"
    assert format_where((), (4, 4), "attn_mask") == ""
    # the CONTRACT caps `where` at 20 tuples: say that there may be more
    many = tuple((i,) for i in range(20))
    assert format_where(many, (64, 64), "attn_mask") == "rows 0-19, ..."


def test_masked_text_never_rounds_to_a_lie() -> None:
    assert masked_text(0.0) == "0%"
    assert masked_text(1.0) == "100%"
    assert masked_text(0.0001) == "<0.1%"
    assert masked_text(0.99999) == ">99.9%"
    assert masked_text(0.484375) == "48.4%"


def test_pattern_text_carries_parameters() -> None:
    t = analyze(padded_causal([6, 3]), name="attn_mask", api="sdpa")
    assert pattern_text(t) == "causal, padding-right (pad 0,3)"
    window = np.tril(np.ones((8, 8), bool)) & ~np.tril(np.ones((8, 8), bool), -3)
    t = analyze(window[None, None], name="mask", api="flex")
    assert pattern_text(t) == "sliding-window (window=3)"


def test_fix_code_is_highlighted_and_prose_is_not() -> None:
    mixed = fix_text("for MHA, zero those rows: out = out.masked_fill(m, 0)", unicode=True)
    assert mixed.plain == "for MHA, zero those rows: out = out.masked_fill(m, 0)"
    assert mixed.spans  # the code part carries syntax styles
    assert all(span.start >= len("for MHA, zero those rows: ") for span in mixed.spans)
    prose = fix_text("make sure every query keeps a key (drop empty sequences)", unicode=True)
    assert not prose.spans


def test_hand_built_report_shows_row_findings_ranges_and_picture() -> None:
    report = Report([FileReport(path="m.safetensors", tensors=[mc002_tensor()],
                                metadata={"format": "pt"})])
    out = render(report)
    assert "m.safetensors  1 tensor, 1 metadata key" in out
    row = next(line for line in out.splitlines() if line.startswith("attn_mask "))
    for cell in ("bool[2,1,3,3]", "bool-true-keep 0.95", "attn_mask", "custom", "50%"):
        assert cell in row
    assert "bool values; read with True = kept" in out
    # findings by severity, each with its location and fix
    errors, warnings, infos = (out.index(f"{s} ") for s in ("error", "warning", "info"))
    assert errors < warnings < infos
    assert "MC002 fully-masked-row  batch 0 row 1; batch 1 rows 0-2" in out
    assert "fix attn_mask = attn_mask | torch.eye(L, dtype=torch.bool)" in out
    # the picture: row 1 of batch 0 is fully masked, marked at the row's end
    assert "attn_mask[0, 0]  3 queries x 3 keys" in out
    lines = out.splitlines()
    grid = [line.strip() for line in lines if re.match(r"^\s+\d  [█·]", line)]
    assert grid == ["0  ██· ·", "1  · · ·  ✗", "2  ██████"]
    assert "█ kept  · masked  ✗ query row with no key to attend" in out
    assert out.rstrip().endswith("1 file, 1 tensor: 1 error, 1 warning, 1 info")


def test_not_a_mask_is_one_row_without_picture_or_findings() -> None:
    weights = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    t = analyze(weights, name="proj.weight")
    assert t.convention == "not-a-mask"
    out = render(Report([FileReport(path="w.npz", tensors=[t])]))
    assert sum("proj.weight" in line for line in out.splitlines()) == 1
    assert "not-a-mask" in out
    assert "kept" not in out and "no findings" not in out


def test_unreadable_file_is_one_line_and_counted() -> None:
    report = Report([
        FileReport(path="bad.safetensors", error="header length 999 exceeds file size 12"),
        FileReport(path="ok.npy", tensors=[analyze(padded_causal([4]), name="attn_mask")]),
    ])
    out = render(report)
    assert "bad.safetensors: header length 999 exceeds file size 12\n" in out
    assert out.rstrip().endswith(
        "2 files, 1 tensor: 0 errors, 0 warnings, 1 info, 1 unreadable file"
    )


def test_file_level_findings_show_line_and_col() -> None:
    lint = Finding("MC501", "large-negative-literal", Severity.WARNING, "-1e9 overflows fp16",
                   line=3, col=8, fix="mask.masked_fill(m, torch.finfo(x.dtype).min)")
    out = render(Report([FileReport(path="model.py", findings=[lint])]))
    assert "MC501 large-negative-literal  line 3:8" in out
    assert "-1e9 overflows fp16" in out


def test_analysed_left_padded_mask_reports_padding_per_sequence() -> None:
    t = analyze(padded_causal([6, 3], side="left"), name="attn_mask", api="sdpa")
    out = render(Report([FileReport(path="left.safetensors", tensors=[t])]))
    assert "causal, padding-left (pad 0,3)" in out
    assert "padded keys per sequence (left): 0, 3" in out
    assert "MC002 fully-masked-row  batch 1 rows 0-2" in out
    assert "warning" in out


def test_no_picture_option() -> None:
    t = analyze(padded_causal([4, 2]), name="attn_mask")
    out = render(Report([FileReport(path="m.npy", tensors=[t])]), picture=False)
    assert "queries x" not in out and "█" not in out
    assert "attn_mask" in out


def test_no_escape_codes_without_colour() -> None:
    out = render(Report([FileReport(path="m", tensors=[mc002_tensor()])]))
    assert not ANSI.search(out)


def test_ascii_output_has_no_unicode() -> None:
    out = render(Report([FileReport(path="m", tensors=[mc002_tensor()])]), unicode=False)
    assert out.isascii()
    assert "1  . . .  x" in out


@pytest.mark.parametrize("width", [40, 60, 80, 160])
def test_any_width_keeps_the_key_content(width: int) -> None:
    t = analyze(padded_causal([64, 40, 64, 10], side="right"), name="model.layers.0.attn_mask")
    report = Report([FileReport(path="batch.safetensors", tensors=[mc002_tensor(), t])])
    out = render(report, width=width)
    assert all(len(line) <= width for line in out.splitlines())
    flat = " ".join(out.split())
    for needle in ("bool-true-keep", "MC002", "fully-masked-row", "batch 0 row 1",
                   "padding-right", "causal", "✗"):
        assert needle in flat or needle in out


def test_colour_console_styles_severities() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=100, force_terminal=True, color_system="standard")
    console.print(render_report(Report([FileReport(path="m", tensors=[mc002_tensor()])])))
    assert "\x1b[1;31merror" in buf.getvalue()


def test_long_path_and_error_stay_on_one_line() -> None:
    path = "/very/long/directory/" * 5 + "mask.safetensors"
    report = Report([FileReport(path=path, error="truncated header: 12 bytes of 9000")])
    out = render(report, width=60)
    assert f"{path}: truncated header: 12 bytes of 9000\n" in out


@settings(max_examples=25, deadline=None)
@given(
    mask=hnp.arrays(np.bool_, hnp.array_shapes(min_dims=1, max_dims=4, max_side=9)),
    width=st.integers(min_value=20, max_value=200),
)
def test_any_mask_at_any_width_renders_within_the_width(mask: np.ndarray, width: int) -> None:
    t = analyze(mask, name="attn_mask")
    out = render(Report([FileReport(path="m", tensors=[t])]), width=width)
    body = [line for line in out.splitlines() if not line.startswith("m  ")]
    assert all(len(line) <= width for line in body)
    assert "1 file, 1 tensor:" in " ".join(out.split())
