"""FlexAttention BlockMasks in analyze, guard, capture and replay (CPU, eager flex)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

import maskcheck  # noqa: E402
from maskcheck.attention.blockmask import expand_block_mask  # noqa: E402
from maskcheck.attention.intercept import GuardError  # noqa: E402

L = 16


def _causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
    return q >= kv


def _block_mask(mask_mod: Any, batch: int | None = None) -> Any:
    return flex.create_block_mask(mask_mod, batch, None, L, L, device="cpu", BLOCK_SIZE=8)


def test_expansion_matches_create_mask_and_counts_blocks() -> None:
    bm = _block_mask(_causal)
    expanded = expand_block_mask(bm)
    assert torch.equal(expanded.keep[0, 0], torch.ones(L, L, dtype=torch.bool).tril())
    # 2x2 blocks of 8: the two diagonal blocks partial, the lower-left full, one skipped
    assert (expanded.full_blocks, expanded.partial_blocks, expanded.skipped_blocks) == (1, 2, 1)


def test_analyze_reads_a_block_mask_like_a_dense_mask() -> None:
    report = maskcheck.analyze(_block_mask(_causal), name="bm")
    assert report.convention == "bool-true-keep" and "causal" in report.pattern
    assert report.params["blocks"] == {"full": 1, "partial": 2, "skipped": 1}
    assert any("2 partial" in e for e in report.evidence)
    assert not [f for f in report.findings if f.severity.value == "error"]


def test_analyze_finds_an_all_padding_sequence_in_a_mask_mod() -> None:
    lengths = torch.tensor([0, 10])  # batch element 0 has no real token

    def padded_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (q >= kv) & (kv < lengths[b])

    report = maskcheck.analyze(_block_mask(padded_causal, batch=2))
    errors = {f.code for f in report.findings if f.severity.value == "error"}
    assert "MC002" in errors


def test_guard_sees_a_direct_flex_attention_call() -> None:
    q = torch.randn(2, 2, L, 8)
    lengths = torch.tensor([0, 10])  # batch element 0 has no real token
    bm = _block_mask(lambda b, h, q_idx, kv: (q_idx >= kv) & (kv < lengths[b]), batch=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(GuardError) as info, maskcheck.guard(action="raise"):
            flex.flex_attention(q, q, q, block_mask=bm)
    assert "MC002" in {f.code for f in info.value.findings}
    assert "(call 1, flex)" in str(info.value)


def test_capture_and_replay_of_a_block_mask_call(tmp_path: Path) -> None:
    q = torch.randn(1, 2, L, 8)
    bm = _block_mask(_causal)
    path = tmp_path / "flex.safetensors"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with maskcheck.capture(path) as st:
            expected = flex.flex_attention(q, q, q, block_mask=bm)
    assert st.saved
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        mask = f.get_tensor("attn_mask")
    assert mask.dtype == torch.bool and torch.equal(mask[0, 0], torch.ones(L, L).tril().bool())
    assert json.loads(meta["maskcheck.block_mask"])["partial"] == 2
    from maskcheck.attention.replay import replay_file

    result = replay_file(str(path))
    assert any("BlockMask" in d for d in result.info["replay_differs"])
    ref = result.paths.ref
    assert ref is not None
    assert torch.allclose(ref.output.float(), expected, atol=1e-5)
