"""Patterns compose: every structure present is tagged, padding included (issue 9, step 3)."""

from __future__ import annotations

import numpy as np
import pytest

import maskcheck

L = 12
POS = np.arange(L)
CAUSAL = POS[None, :] <= POS[:, None]
SLIDING = CAUSAL & (POS[None, :] > POS[:, None] - 4)  # Mistral / Gemma2 local layers
LOCAL = np.abs(POS[None, :] - POS[:, None]) <= 2  # ModernBERT local attention
CHUNKED = CAUSAL & (POS[None, :] // 4 == POS[:, None] // 4)  # Llama4 chunked attention
DOC = np.array([0] * 5 + [1] * 4 + [2] * 3)
PACKED = CAUSAL & (DOC[None, :] == DOC[:, None])  # packed documents
PREFIX = CAUSAL | (POS[None, :] < 5)  # PaliGemma prefix-LM
IMAGE = CAUSAL.copy()
IMAGE[3:7, 3:7] = True  # Gemma3 image tokens attend bidirectionally


def padded(core: np.ndarray, side: str) -> np.ndarray:
    real = np.ones((2, L), bool)
    if side == "left":
        real[0, :3] = False
    elif side == "right":
        real[0, 9:] = False
    out: np.ndarray = core[None, None] & real[:, None, None, :]
    return out


CASES = [
    (SLIDING, ["sliding-window"], {"window": 4}),
    (LOCAL, ["sliding-window"], {"window": 5, "window_forward": 2}),
    (CHUNKED, ["block-diagonal", "causal"], {"causal_within_blocks": True}),
    (PACKED, ["block-diagonal", "causal"], {"causal_within_blocks": True}),
    (PREFIX, ["prefix-lm"], {"prefix": 5}),
    (IMAGE, ["custom", "causal"], {"bidirectional_blocks": [[3, 6]]}),
]


IDS = ["sliding", "local", "chunked", "packed", "prefix", "image"]
# (left padding of 3 would eat into the 5-token prefix: test_prefix_lm_with_left_padding)
PARAMS = [pytest.param(*case, side, id=f"{name}-{side}")
          for case, name in zip(CASES, IDS, strict=True)
          for side in ("none", "left", "right") if not (name == "prefix" and side == "left")]


@pytest.mark.parametrize(("core", "tags", "params", "side"), PARAMS)
def test_structure_and_padding_are_both_tagged(
    core: np.ndarray, tags: list[str], params: dict[str, object], side: str
) -> None:
    r = maskcheck.analyze(padded(core, side), api="sdpa", name="attn_mask")
    want = tags + ([f"padding-{side}"] if side != "none" else [])
    assert r.pattern == want, (r.pattern, r.params)
    for key, value in params.items():
        assert r.params.get(key) == value, (key, r.params)
    assert not [f for f in r.findings if f.severity.value in ("error", "warning")]


def test_prefix_lm_with_left_padding() -> None:
    prefix = CAUSAL | (POS[None, :] < 8)
    r = maskcheck.analyze(padded(prefix, "left"), api="sdpa", name="attn_mask")
    assert r.pattern == ["prefix-lm", "padding-left"]
    assert r.params["prefix"] == 8


def test_a_broken_chunk_is_not_block_diagonal() -> None:
    broken = CHUNKED.copy()
    broken[6, 0] = True  # a query of chunk 2 sees the first chunk
    r = maskcheck.analyze(broken, api="sdpa", name="attn_mask")
    assert "block-diagonal" not in r.pattern


@pytest.mark.parametrize("core", [PACKED, IMAGE, CHUNKED], ids=["packed", "image", "chunked"])
def test_an_inverted_self_attention_mask_is_caught_whatever_its_shape(core: np.ndarray) -> None:
    inverted = np.where(core, np.float32(np.finfo(np.float32).min), np.float32(0))[None, None]
    r = maskcheck.analyze(inverted, api="eager", name="attention_mask")
    assert "MC040" in {f.code for f in r.findings}, (r.pattern, r.findings)
    ok = np.where(core, np.float32(0), np.float32(np.finfo(np.float32).min))[None, None]
    assert "MC040" not in {f.code for f in maskcheck.analyze(ok, api="eager").findings}


def test_a_window_that_never_bites_in_a_short_sequence_is_still_a_window() -> None:
    window = CAUSAL & (POS[:, None] - POS[None, :] < 10)  # cuts only in the long sequence
    real = np.ones((2, L), bool)
    real[0, :4] = False  # sequence 0 has 8 real tokens: the window never cuts there
    r = maskcheck.analyze(window[None, None] & real[:, None, None, :], api="sdpa",
                          name="attn_mask")
    assert r.pattern == ["sliding-window", "padding-left"]
