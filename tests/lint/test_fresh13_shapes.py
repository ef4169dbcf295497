"""Real code shapes behind the false alarms of the fresh13 precision set's first reading (read
by hand in benchmarks/lint_verdicts.json): each correct source next to no finding, and the
wrong form that must still be found (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# modelscope's SPACE generator keeps float32 numpy penalties of -1e10.
NUMPY_FULL = '''import numpy as np
import torch


def penalties(vocab_size, eos_id):
    scores_after_end = np.full(vocab_size, -1e10, dtype="float32")
    scores_after_end[eos_id] = 0
    return torch.from_numpy(scores_after_end)
'''


def test_numpys_full_is_no_torch_fill(found: Found) -> None:
    assert found(NUMPY_FULL) == []


def test_torchs_full_in_float16_is_still_found(found: Found) -> None:
    assert found(NUMPY_FULL.replace('np.full(vocab_size, -1e10, dtype="float32")',
                                    "torch.full((vocab_size,), -1e10, dtype=torch.float16)")
                 ) == [(6, "MC501")]


def test_a_float32_numpy_array_holds_minus_1e10() -> None:
    assert float(np.full(2, -1e10, dtype="float32")[0]) == pytest.approx(-1e10)
    with pytest.raises(RuntimeError, match="overflow"):
        torch.full((2,), -1e10, dtype=torch.float16)


# ms-swift's template builds res["attention_mask"] as a bool triangle, then inverts it.
WRITTEN_FIELD = '''import torch


def pad_batch(seq_lens, seq_len):
    res = {}
    res["attention_mask"] = torch.tril(torch.ones((len(seq_lens), seq_len, seq_len),
                                                  dtype=torch.bool))
    res["attention_mask"] = ~res["attention_mask"]
    return res
'''


def test_a_field_the_function_wrote_is_read_as_written(found: Found) -> None:
    assert found(WRITTEN_FIELD) == []


def test_a_collated_attention_mask_inverted_is_still_found(found: Found) -> None:
    collated = '''import torch


def forward(model, batch):
    return model(key_padding_mask=~batch["attention_mask"])
'''
    assert found(collated) == [(5, "MC518")]


def test_invert_of_a_bool_triangle_is_its_complement() -> None:
    tri = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    assert torch.equal(~tri, torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1))


# unsloth-zoo's tests run a statement for the error it raises.
UNDER_RAISES = '''import pytest
import torch


def test_merge_needs_one_dtype():
    dst = torch.zeros(1, 4, dtype=torch.float16)
    mask = torch.ones(1, 4, dtype=torch.bool)
    src = torch.arange(4, dtype=torch.float32).reshape(1, 4)
    with pytest.raises(RuntimeError, match="same dtype"):
        dst.masked_scatter(mask, src)
'''


def test_a_statement_under_pytest_raises_is_left_alone(found: Found) -> None:
    assert found(UNDER_RAISES) == []


def test_the_same_statement_outside_raises_is_found(found: Found) -> None:
    outside = UNDER_RAISES.replace('    with pytest.raises(RuntimeError, match="same dtype"):\n'
                                   "        dst.masked_scatter", "    dst.masked_scatter")
    assert found(outside) == [(9, "MC525")]


def test_masked_scatter_refuses_two_dtypes() -> None:
    dst = torch.zeros(1, 4, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="same dtype"):
        dst.masked_scatter(torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, 4))


# SRN's bidirectional GSRM: a look-ahead mask and its mirror, built together on purpose.
BOTH_DIRECTIONS = '''import torch


def gsrm_masks(max_len):
    forward = torch.triu(torch.full((max_len, max_len), -torch.inf), diagonal=1)
    backward = torch.tril(torch.full((max_len, max_len), -torch.inf), diagonal=-1)
    return forward, backward
'''


def test_a_mask_and_its_mirror_built_together_are_left_alone(found: Found) -> None:
    assert found(BOTH_DIRECTIONS) == []


def test_the_mirror_alone_is_still_found(found: Found) -> None:
    alone = BOTH_DIRECTIONS.replace(
        "    forward = torch.triu(torch.full((max_len, max_len), -torch.inf), diagonal=1)\n",
        "").replace("return forward, backward", "return backward")
    assert found(alone) == [(5, "MC521")]


def test_the_backward_mask_hides_the_past() -> None:
    backward = torch.tril(torch.full((3, 3), -torch.inf), diagonal=-1)
    weights = torch.softmax(torch.zeros(3, 3) + backward, dim=-1)
    assert weights[2].tolist() == [0.0, 0.0, 1.0]  # the last query sees only itself


# helical's encoder: is_causal only in the branch where the merged mask is None.
CAUSAL_ONLY_WITHOUT_MASK = '''import torch
import torch.nn.functional as F


def attend(q, k, v, merged_mask, is_causal, need_weights):
    sdpa_is_causal = False
    if is_causal:
        causal = torch.triu(torch.full((4, 4), float("-inf")), diagonal=1)
        if need_weights or merged_mask is not None:
            merged_mask = causal if merged_mask is None else merged_mask + causal
        else:
            sdpa_is_causal = True
    return F.scaled_dot_product_attention(q, k, v, attn_mask=merged_mask, is_causal=sdpa_is_causal)
'''


def test_is_causal_set_where_the_mask_is_none_is_silent(found: Found) -> None:
    assert found(CAUSAL_ONLY_WITHOUT_MASK) == []


def test_is_causal_set_where_the_mask_may_be_given_is_found(found: Found) -> None:
    may = CAUSAL_ONLY_WITHOUT_MASK.replace("need_weights or merged_mask", "need_weights and "
                                           "merged_mask")
    assert found(may) == [(13, "MC506")]
