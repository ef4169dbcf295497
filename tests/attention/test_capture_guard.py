"""capture -> replay round trips on real calls, and the runtime guard."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import maskcheck  # noqa: E402
from maskcheck.attention.capture_file import load_call  # noqa: E402
from maskcheck.attention.intercept import GuardError, MaskcheckWarning  # noqa: E402
from maskcheck.attention.paths import run_all_paths  # noqa: E402


def test_mha_self_attention_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 4, 8)
    pad = torch.tensor([[False, False, False, False], [False, False, True, True]])
    path = tmp_path / "mha.safetensors"
    with maskcheck.capture(path) as st:
        expected, _ = mha(x, x, x, key_padding_mask=pad, need_weights=False)
    assert st.saved and st.calls == 1 and "test_capture_guard.py" in st.site
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        assert {"query", "key", "value", "key_padding_mask", "mha.in_proj_weight",
                "mha.out_proj_weight"} <= set(f.keys())
    assert json.loads(meta["maskcheck.aliases"]) == {"key": "query", "value": "query"}
    assert meta["maskcheck.api"] == "mha" and meta["maskcheck.layout"] == "seq_first"
    call, _, generated = load_call(str(path))
    assert not generated and call.self_attention()
    q, k, v = call.tensors()
    assert q is k is v and q.shape == (2, 4, 8)  # back to batch-first
    result = run_all_paths(call)
    no_w = result.by_path("no_weights")
    assert no_w is not None and no_w.output is not None
    torch.testing.assert_close(no_w.output.float(), expected.detach(), rtol=1e-5, atol=1e-6)
    fast = result.by_path("fast_path")
    assert fast is not None and fast.run.extra["fast_path_ran"] is True
    assert all(p.run.status == "ok" for p in result.paths)


def test_sdpa_round_trip(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 3, 8, generator=g) for _ in range(3))
    keep = torch.ones(2, 1, 3, 3, dtype=torch.bool).tril()
    path = tmp_path / "sdpa.safetensors"
    with maskcheck.capture(path, nth=2):
        F.scaled_dot_product_attention(q, k, v)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.5)
    call, _, _ = load_call(str(path))
    assert call.kwargs["scale"] == 0.5 and torch.equal(call.attn_mask, keep)
    result = run_all_paths(call)
    default = result.by_path("default")
    assert default is not None and default.output is not None
    torch.testing.assert_close(default.output.float(), expected, rtol=1e-5, atol=1e-6)
    assert default.run.max_abs_err is not None and default.run.max_abs_err < 1e-5


def test_capture_first_nan_call(tmp_path: Path) -> None:
    q = torch.randn(1, 1, 3, 4)
    keep = torch.ones(3, 3, dtype=torch.bool)
    bad_v = q.clone()
    bad_v[..., 2, :] = float("nan")
    path = tmp_path / "nan.safetensors"
    with maskcheck.capture(path, when="nan") as st:
        F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
        F.scaled_dot_product_attention(q, q, bad_v, attn_mask=keep)
    assert st.saved and st.calls == 2
    call, meta, _ = load_call(str(path))
    assert meta["maskcheck.when"] == "nan" and torch.isnan(call.value).any()
    assert call.aliases == {"key": "query"}


def test_capture_without_a_call_warns(tmp_path: Path) -> None:
    with pytest.warns(MaskcheckWarning, match="nothing written"), \
            maskcheck.capture(tmp_path / "x.safetensors"):
        torch.ones(2) + 1
    assert not (tmp_path / "x.safetensors").exists()


def test_guard_warns_at_user_call_site() -> None:
    q = torch.randn(1, 2, 4, 8)
    mha_style = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)  # True = masked
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with maskcheck.guard() as g:
            F.scaled_dot_product_attention(q, q, q, attn_mask=mha_style)
    hits = [w for w in caught if issubclass(w.category, MaskcheckWarning)]
    assert hits and hits[0].filename == __file__ and "MC010" in str(hits[0].message)
    assert g.calls.total == 1


def test_guard_raises_for_fully_padded_mha() -> None:
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    pad = torch.tensor([[False, False, False], [True, True, True]])
    with pytest.raises(GuardError) as info, maskcheck.guard(action="raise"):
        mha(x, x, x, key_padding_mask=pad)
    assert "MC002" in str(info.value) and __file__ in info.value.site
    assert isinstance(info.value, maskcheck.errors.MaskcheckError)


def test_guard_check_output_nan_in_masked_value() -> None:
    q = torch.randn(1, 1, 4, 8)
    v = q.clone()
    v[..., 3, :] = float("nan")
    keep = torch.ones(4, 4, dtype=torch.bool)
    keep[:, 3] = False
    with pytest.raises(GuardError, match="MC061"), maskcheck.guard("raise", check_output=True):
        F.scaled_dot_product_attention(q, q, v, attn_mask=keep)


def test_guard_stays_quiet_on_correct_calls() -> None:
    q = torch.randn(2, 2, 4, 8)
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    with warnings.catch_warnings():
        warnings.simplefilter("error", MaskcheckWarning)
        with maskcheck.guard(check_output=True) as g:
            for _ in range(3):
                F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    assert g.calls.total == 3 and not g.findings


def test_guard_reuses_an_analysis_only_for_the_same_query_dtype() -> None:
    # One -1e9 mask object used by a float32 call, then by a float16 call in the same block:
    # MC020 (the masked value overflows the query's dtype) must still be found on the second.
    import torch.nn.functional as F

    mask = torch.zeros(4, 4)
    mask[:, 3] = -1e9
    q32 = torch.randn(1, 1, 4, 8)
    with warnings.catch_warnings(record=True) as caught, maskcheck.guard(fail_on="info"):
        warnings.simplefilter("always")
        for q in (q32, q32.half()):
            F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    assert any("MC020" in str(w.message) for w in caught)
