"""The shapes of held-out 33 (LLM fine-tuning, alignment and serving code) that its first
reading missed or misread, each bad source next to the findings it must give, its correct form
next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# A rollout's attention: the cache concatenated in the body, the causal flag in the else branch,
# where the keys are the plain ones.
ROLLOUT = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, layer_past=None):
    if layer_past is not None:
        k = torch.cat([layer_past[0], k], dim=2)
        v = torch.cat([layer_past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v)
    else:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y, out
"""


def test_the_else_branch_reads_the_values_before_the_if(found: Found) -> None:
    # line 11 reads the plain keys; line 12, after the if, still reads the body's cached ones
    assert found(ROLLOUT) == [(12, "MC510")]


# Whisper's and a speculative decoder's flag: causal whenever more than one new token comes,
# whatever the cache holds.
DRAFT = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, layer_past=None):
    T = q.shape[2]
    if layer_past is not None:
        k = torch.cat([layer_past[0], k], dim=2)
        v = torch.cat([layer_past[1], v], dim=2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
"""


def test_is_causal_with_a_longer_key_aligns_to_the_top_left() -> None:
    q, k = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 5, 4)
    v = torch.randn(1, 1, 5, 4)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    first = F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1])
    assert torch.allclose(out[:, :, :1], first, atol=1e-6)  # the first new query sees key 0 only


def test_a_flag_true_for_several_new_tokens_meets_the_cache(found: Found) -> None:
    assert found(DRAFT) == [(10, "MC510")]
    # Hugging Face's flag, True only without a mask (a cache comes with one), is not reported
    guarded = DRAFT.replace("is_causal=T > 1)", "attn_mask=None, is_causal=mask is None and T > 1)")
    guarded = guarded.replace("def attend(q, k, v, layer_past=None):",
                              "def attend(q, k, v, layer_past=None, mask=None):")
    assert [code for _, code in found(guarded)] == []


# DistilBERT-style 4-D pair mask filled with -inf.
PAIR4D = """\
import torch
import torch.nn.functional as F


def attend(q, k, mask):
    scores = q @ k.transpose(2, 3)
    scores = scores.masked_fill(~(mask[:, None, :, None] & mask[:, None, None, :]), float("-inf"))
    return F.softmax(scores, dim=-1)
"""


def test_a_padded_querys_row_of_a_pair_mask_is_nan() -> None:
    keep = torch.tensor([[True, False]])
    pair = keep[:, None, :, None] & keep[:, None, None, :]
    weights = torch.zeros(1, 1, 2, 2).masked_fill(~pair, float("-inf")).softmax(-1)
    assert torch.isnan(weights[0, 0, 1]).all()


def test_a_4d_pair_mask_is_a_pair_mask(found: Found) -> None:
    assert found(PAIR4D) == [(7, "MC507")]
    keys_only = PAIR4D.replace("~(mask[:, None, :, None] & mask[:, None, None, :])",
                               "~mask[:, None, None, :]")
    assert found(keys_only) == []
