"""Pad queries: empty rows of padding positions are info, of real tokens an error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import maskcheck
from maskcheck.analysis import analyze_file
from maskcheck.analysis.padquery import pad_query_rows
from maskcheck.model import Severity

L = 8
POS = np.arange(L)
CAUSAL = POS[None, :] <= POS[:, None]
SLIDING = CAUSAL & (POS[None, :] > POS[:, None] - 3)
LOCAL = np.abs(POS[None, :] - POS[:, None]) <= 1  # ModernBERT-style bidirectional window
CHUNKED = CAUSAL & (POS[None, :] // 4 == POS[:, None] // 4)  # Llama4-style chunks of 4
FULL = np.ones((L, L), bool)


def real_tokens(side: str) -> np.ndarray:
    real = np.ones((2, L), bool)
    if side == "left":
        real[0, :5] = False
    else:
        real[0, 3:] = False
    return real


def mc002(report: maskcheck.TensorReport) -> list[tuple[str, int]]:
    return [(f.severity.value, len(f.where)) for f in report.findings if f.code == "MC002"]


@pytest.mark.parametrize("core", [CAUSAL, SLIDING, LOCAL, CHUNKED, FULL],
                         ids=["causal", "sliding", "local", "chunked", "full"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_have_no_error_or_warning(core: np.ndarray, side: str) -> None:
    mask = core[None, None] & real_tokens(side)[:, None, None, :]
    report = maskcheck.analyze(mask, api="sdpa", name="attn_mask")
    bad = [f for f in report.findings if f.severity in (Severity.ERROR, Severity.WARNING)]
    assert not bad, [f.message for f in bad]
    for sev, _ in mc002(report):
        assert sev == "info"
    # the verdict is in the report too, per matrix
    if mc002(report):
        pads = report.params["pad_queries"]
        assert set(pads[0]) <= set(np.flatnonzero(~real_tokens(side)[0]).tolist())


def test_same_masks_in_additive_float16_are_info_too() -> None:
    mask = SLIDING[None, None] & real_tokens("right")[:, None, None, :]
    add = np.where(mask, 0, np.finfo(np.float16).min).astype(np.float16)
    report = maskcheck.analyze(add, api="eager", name="attention_mask")
    assert [s for s, _ in mc002(report)] == ["info"]


def test_an_all_padding_sequence_stays_an_error() -> None:
    real = np.ones((2, L), bool)
    real[1] = False
    mask = CAUSAL[None, None] & real[:, None, None, :]
    report = maskcheck.analyze(mask, api="sdpa", name="attn_mask")
    assert ("error", L) in mc002(report)


def test_a_real_row_masked_by_mistake_is_an_error() -> None:
    mask = CAUSAL.copy()
    mask[4] = False  # query 4 sees nothing, yet later queries attend key 4
    report = maskcheck.analyze(mask, api="sdpa", name="attn_mask")
    assert mc002(report) == [("error", 1)]


def test_companion_padding_mask_decides_pad_queries_of_a_windowed_mask() -> None:
    # A window that keeps the pad queries' own keys: from the mask alone they look real.
    band = np.abs(POS[None, :] - POS[:, None]) <= 1
    mask = np.broadcast_to(band, (2, 1, L, L)).copy()
    mask[0, :, 5:] = False  # pad queries of sequence 0 (positions 5..7) see nothing
    real = np.ones((2, L), bool)
    real[0, 5:] = False
    alone = maskcheck.analyze(mask, api="sdpa", name="attn_mask")
    assert ("error", 1) in mc002(alone)  # query 5: real token 4 attends key 5
    with_pad = maskcheck.analyze(mask, api="sdpa", name="attn_mask", real_keys=real)
    assert [s for s, _ in mc002(with_pad)] == ["info"]


def test_companion_in_the_same_file(tmp_path: Path) -> None:
    band = np.abs(POS[None, :] - POS[:, None]) <= 1
    mask = np.broadcast_to(band, (2, 1, L, L)).copy()
    mask[0, :, 5:] = False
    hf = np.ones((2, L), np.int64)
    hf[0, 5:] = 0
    path = tmp_path / "call.safetensors"
    save_file({"attn_mask": mask, "attention_mask": hf}, str(path))
    report = analyze_file(str(path), api="sdpa")
    (t,) = [t for t in report.tensors if t.name == "attn_mask"]
    assert [f.severity.value for f in t.findings if f.code == "MC002"] == ["info"]


def test_pad_query_rows_on_plain_arrays() -> None:
    mask = CAUSAL[None, None] & real_tokens("left")[:, None, None, :]
    pad = pad_query_rows(mask)
    assert pad.shape == (2, 1, L)
    assert pad[0, 0].tolist() == [True] * 5 + [False] * 3
    assert not pad[1].any()
    # no real query at all: nothing is called padding
    assert not pad_query_rows(np.zeros((1, L, L), bool)).any()
    # the companion maps (N, S) onto an (N*H, L, S) mask
    real = np.ones((2, L), bool)
    real[1, -2:] = False
    pad3 = pad_query_rows(np.broadcast_to(FULL, (4, L, L)), real)
    assert pad3[2:, -2:].all() and not pad3[:2].any()
