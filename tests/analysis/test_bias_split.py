"""Masks that carry a bias: masked = at or below -1e3, kept = the rest (issue 9, step 2)."""

from __future__ import annotations

import numpy as np

import maskcheck
from maskcheck.selection import Selection

L = 6
POS = np.arange(L)
CAUSAL = POS[None, :] <= POS[:, None]
F32_MIN = float(np.finfo(np.float32).min)


def codes(report: maskcheck.TensorReport) -> dict[str, str]:
    return {f.code: f.severity.value for f in report.findings}


def alibi(real: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """BLOOM/Falcon-style: per-head slope x key distance, merged with causal + padding."""
    slopes = np.array([0.5, 0.25], np.float32)
    dist = (POS[None, :] - POS[:, None]).astype(np.float32)
    bias = slopes[None, :, None, None] * dist[None, None]
    keep = CAUSAL[None, None] & real[:, None, None, :]
    return np.where(keep, bias, np.finfo(dtype).min).astype(dtype)


def test_seed_buffer_kept_one_is_kept() -> None:
    # the seed article's buffer: ones, -1e9 above the diagonal
    m = np.ones((L, L), np.float32)
    m[np.triu_indices(L, 1)] = -1e9
    r = maskcheck.analyze(m, name="mask", api="sdpa")
    assert (r.convention, r.pattern) == ("additive", ["causal"])
    assert codes(r) == {"MC014": "error"}


def test_t5_bias_alone_is_full_with_no_findings() -> None:
    bias = (np.clip(POS[None, :] - POS[:, None], -3, 3) * 0.013).astype(np.float32)[None, None]
    r = maskcheck.analyze(bias, name="position_bias", api="sdpa",
                          selection=Selection.build(["ALL"]))
    assert (r.convention, r.pattern, codes(r)) == ("additive", ["full"], {})
    assert r.masked_fraction == 0.0


def test_alibi_with_padding_reads_the_pattern_and_pad_queries() -> None:
    real = np.ones((2, L), bool)
    real[0, :2] = False
    r = maskcheck.analyze(alibi(real), name="attention_mask", api="eager")
    assert r.pattern == ["causal", "padding-left"]
    assert codes(r) == {"MC002": "info"}
    assert r.params["bias"]["min"] < 0 <= r.params["bias"]["max"]
    assert any("bias" in e for e in r.evidence)


def test_alibi_with_an_all_padding_sequence_is_an_error() -> None:
    real = np.ones((2, L), bool)
    real[1] = False
    r = maskcheck.analyze(alibi(real, np.float16), name="attention_mask", api="eager")
    assert "error" in [f.severity.value for f in r.findings if f.code == "MC002"]


def test_longformer_global_tokens_are_kept_not_wrong_sign() -> None:
    m = np.zeros((2, 1, 1, L), np.float32)
    m[0, ..., -2:] = F32_MIN
    m[:, ..., 0] = -F32_MIN  # +finfo.max: global attention
    r = maskcheck.analyze(m, name="extended_attention_mask", api="eager")
    assert r.convention == "additive" and "padding-right" in r.pattern
    assert "MC011" not in codes(r)
    assert any("global" in e for e in r.evidence)


def test_many_valued_bias_with_inf_mask_is_analysed() -> None:
    rng = np.random.default_rng(0)
    bias = rng.standard_normal((2, 4, L, L)).astype(np.float32)
    m = np.where(CAUSAL, bias, -np.inf).astype(np.float32)
    r = maskcheck.analyze(m, name="attn_bias", api="sdpa")
    assert r.pattern == ["causal"] and "MC002" not in codes(r)
    inverted = np.where(~CAUSAL | (POS[:, None] == 0), bias, -np.inf).astype(np.float32)
    inverted[..., 0, :] = -np.inf  # the first query sees nothing
    r2 = maskcheck.analyze(inverted, name="attn_bias", api="sdpa")
    assert "MC002" in codes(r2)


def test_the_bias_look_is_reported_on_real_library_masks() -> None:
    from pathlib import Path

    from maskcheck.analysis import analyze_file

    fixtures = Path(__file__).resolve().parents[2] / "fixtures"
    looks = {}
    for name in ("real_bloom_alibi_left_padding", "real_t5_decoder_bias"):
        (t,) = analyze_file(str(fixtures / f"{name}.safetensors"), api="eager").tensors
        looks[name] = t.params["bias"]["looks_like"]
    assert looks == {"real_bloom_alibi_left_padding": "alibi",
                     "real_t5_decoder_bias": "relative-position"}
    rng = np.random.default_rng(1)
    noise = np.where(CAUSAL, rng.standard_normal((L, L)), -np.inf).astype(np.float32)
    r = maskcheck.analyze(noise[None, None], name="attn_bias", api="sdpa")
    assert r.params["bias"]["looks_like"] == "none"


def test_bias_look_of_a_padding_only_matrix_does_not_fail() -> None:
    from maskcheck.analysis.bias import bias_look

    alibi_rows = np.tile(np.arange(L, dtype=np.float32) * 0.5, (L, 1))
    m = np.stack([np.where(CAUSAL, alibi_rows, -np.inf), np.full((L, L), -np.inf)])
    assert bias_look(m.astype(np.float32)) == "alibi"
    assert bias_look(np.full((2, L, L), -np.inf, np.float32)) == "none"
