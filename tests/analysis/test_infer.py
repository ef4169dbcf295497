"""Inference on masks built by real torch code paths (and on tensors that are not masks)."""

from __future__ import annotations

import numpy as np
import pytest

import maskcheck
from maskcheck.selection import Selection

torch = pytest.importorskip("torch")


def test_generate_square_subsequent_mask_float_is_additive_causal() -> None:
    m = torch.nn.Transformer.generate_square_subsequent_mask(6)
    r = maskcheck.analyze(m, name="tgt_mask")
    assert (r.convention, r.role, r.pattern) == ("additive", "attn_mask", ["causal"])
    assert {f.code for f in r.findings} == {"MC050"}


def test_generate_square_subsequent_mask_bool_is_true_masked() -> None:
    m = torch.nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.bool)
    r = maskcheck.analyze(m, name="tgt_mask")
    assert r.convention == "bool-true-masked"
    assert r.pattern == ["causal"]
    # the same mask given to SDPA is inverted (conventions.md §2.7)
    r = maskcheck.analyze(m, name="attn_mask", api="sdpa")
    assert "MC010" in {f.code for f in r.findings}


def test_causal_lower_right_is_recognised() -> None:
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(3, 7)
    dense = bias._materialize("cpu")
    r = maskcheck.analyze(dense, name="attn_mask", api="sdpa")
    assert r.pattern == ["causal-lower-right"]
    assert not r.findings


def test_flex_create_mask_sliding_window() -> None:
    from torch.nn.attention.flex_attention import create_mask

    def sliding(b: object, h: object, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (q >= kv) & (q - kv < 3)

    m = create_mask(sliding, 1, 1, 16, 16, device="cpu")
    r = maskcheck.analyze(m, name="block_mask", api="flex")
    assert r.convention == "bool-true-keep"
    assert r.pattern == ["sliding-window"]
    assert r.params["window"] == 3
    assert not [f for f in r.findings if f.code != "MC051"]


def test_flex_document_mask_is_block_diagonal() -> None:
    from torch.nn.attention.flex_attention import create_mask

    doc = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])

    def same_doc(b: object, h: object, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return doc[q] == doc[kv]

    m = create_mask(same_doc, 1, 1, 12, 12, device="cpu")
    r = maskcheck.analyze(m, name="mask")
    assert r.pattern == ["block-diagonal"]
    assert r.params["block"] == 4


def test_bfloat16_finfo_min_mask() -> None:
    keep = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    m = torch.zeros(4, 4, dtype=torch.bfloat16).masked_fill(~keep, torch.finfo(torch.bfloat16).min)
    r = maskcheck.analyze(m, name="attn_mask")
    assert (r.dtype, r.convention, r.pattern) == ("bfloat16", "additive", ["causal"])
    assert "MC021" not in {f.code for f in r.findings}  # opt-in: true of every stock HF mask
    asked = maskcheck.analyze(m, name="attn_mask", selection=Selection.build(["ALL"]))
    assert "MC021" in {f.code for f in asked.findings}


def test_mha_key_padding_mask_fully_padded_sequence_is_an_error() -> None:
    kpm = torch.tensor([[False, False, True, True], [True, True, True, True], [False] * 4])
    r = maskcheck.analyze(kpm, name="src_key_padding_mask")
    assert (r.convention, r.role) == ("bool-true-masked", "key_padding_mask")
    (f,) = [f for f in r.findings if f.code == "MC002"]
    assert f.severity.value == "error"
    assert [list(w) for w in f.where] == [[1]]


@pytest.mark.parametrize(
    ("name", "tensor"),
    [
        ("linear.weight", torch.nn.Linear(16, 16).weight.detach()),
        ("hidden_states", torch.randn(2, 8, 16)),
        ("attn_probs", torch.softmax(torch.randn(2, 4, 4), -1)),
        ("input_ids", torch.randint(0, 30000, (2, 12))),
    ],
)
def test_tensors_that_are_not_masks(name: str, tensor: torch.Tensor) -> None:
    r = maskcheck.analyze(tensor, name=name)
    assert r.convention == "not-a-mask"
    assert r.pattern == [] and r.findings == []


def test_names_and_values_that_agree_give_high_confidence() -> None:
    keep = np.arange(6)[None, :] < np.array([[6], [4]])
    r = maskcheck.analyze(keep.astype(np.int64), name="attention_mask")
    assert (r.convention, r.role) == ("int-one-keep", "hf_attention_mask")
    assert r.confidence >= 0.9
    assert r.pattern == ["padding-right"]


def test_polarity_from_structure_not_ambiguous() -> None:
    n = 12
    pos = np.arange(n)
    causal = pos[None, :] <= pos[:, None]
    window = causal & (pos[None, :] > pos[:, None] - 4)
    real = np.ones((2, n), bool)
    real[0, 8:] = False
    masks = {
        "flex sliding window + padding": window[None, None] & real[:, None, None, :],
        "strided sparse": causal & (((pos[:, None] - pos[None, :]) % 3 == 0)
                                    | (pos[:, None] - pos[None, :] < 2)),
        "attention sinks": window | (causal & (pos[None, :] < 2)),
        "upper-left causal, L < S": np.arange(4)[:, None] >= np.arange(8)[None, :],
    }
    for what, m in masks.items():
        r = maskcheck.analyze(m, name="mask")
        assert r.convention == "bool-true-keep", (what, r.convention, r.evidence)
        assert not [f for f in r.findings if f.severity.value in ("error", "warning")], what
    # truly undecidable stays ambiguous: a pure padding mask with no unpadded sequence
    r = maskcheck.analyze(np.array([[True, True, False], [True, False, False]]), name="m")
    assert r.convention == "ambiguous"
