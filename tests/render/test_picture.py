"""Mask pictures: every cell drawn from the mask, downsampling stated and weighted honestly."""

from __future__ import annotations

import io
import re

import numpy as np
from rich.console import Console

from maskcheck.analysis import analyze
from maskcheck.model import TensorReport
from maskcheck.render.picture import Grid, empty_rows_from_findings, rebin, render_picture


def lines_of(report: TensorReport, **kwargs: object) -> list[str]:
    picture = render_picture(report, **kwargs)  # type: ignore[arg-type]
    assert picture is not None
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(picture)
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def grid_rows(lines: list[str]) -> list[str]:
    """The picture's rows without their labels."""
    return [re.sub(r"^\s*\d*  ", "", line) for line in lines[2:-1]]


def test_all_false_mask_draws_no_diagonal() -> None:
    # transformers' AttentionMaskVisualizer paints the diagonal even here; we must not.
    t = analyze(np.zeros((3, 3), bool), name="attn_mask", api="sdpa")
    rows = grid_rows(lines_of(t))
    assert all("█" not in r for r in rows)
    assert all(r.endswith("✗") for r in rows)


def test_small_causal_mask_is_exact() -> None:
    t = analyze(np.tril(np.ones((4, 4), bool))[None, None], name="mask", api="flex")
    lines = lines_of(t)
    assert lines[0] == "mask[0, 0]  4 queries x 4 keys"
    assert grid_rows(lines) == ["██· · ·", "████· ·", "██████·", "████████"]
    assert lines[-1].strip() == "█ kept  · masked"


def test_big_mask_is_downsampled_with_the_scale_stated() -> None:
    n = 1024
    keep = np.tril(np.ones((n, n), bool))
    t = analyze(keep, name="attn_mask", api="sdpa")
    lines = lines_of(t, max_width=80, max_rows=16)
    assert "each cell = 64x" in lines[0]
    assert "▒ partly kept" in lines[-1]
    rows = grid_rows(lines)
    assert len(rows) == 16
    assert all(len(r) <= 80 for r in lines)
    # the diagonal band is partial, below it kept, above it masked
    assert rows[-1].startswith("█") and rows[0].startswith("▒") and rows[0].endswith("·")


def test_rebin_weights_the_short_last_cell() -> None:
    # 3 elements per axis in cells of 2: the last cell covers one element only.
    grid = Grid([[1.0, 0.0], [1.0, 0.0]], scale=(2, 2), size=(3, 3))
    merged = rebin(grid, max_rows=1, max_cols=1)
    assert merged.scale == (4, 4)
    assert merged.cells == [[6 / 9]]


def test_padding_mask_rows_are_sequences_and_empty_ones_marked() -> None:
    kpm = np.zeros((3, 5), bool)
    kpm[0, 3:] = True
    kpm[1, :] = True  # all padding
    t = analyze(kpm, name="key_padding_mask")
    lines = lines_of(t)
    assert lines[0] == "key_padding_mask  3 sequences x 5 keys"
    rows = grid_rows(lines)
    assert rows[1].endswith("✗") and not rows[0].endswith("✗")
    assert "sequence with no key to attend" in lines[-1]


def test_mc002_rows_are_marked_even_when_a_cell_hides_them() -> None:
    n = 256
    keep = np.tril(np.ones((n, n), bool))
    keep[100] = False  # one real query that sees nothing
    t = analyze(keep, name="attn_mask", api="sdpa")
    assert 100 in empty_rows_from_findings(t)
    lines = lines_of(t, max_width=60, max_rows=16)
    marked = [line for line in lines[2:-1] if line.endswith("✗")]
    assert len(marked) == 1  # the band holding row 100, though most of it attends


def test_nothing_to_draw() -> None:
    t = analyze(np.random.default_rng(1).normal(size=(8, 8)), name="w")
    assert render_picture(t) is None
