"""MC515: a (batch, seq) padding mask given as it is to SDPA's or MultiheadAttention's attn_mask
(conventions.md 2.6). Each bad source next to the findings it must give, its correct form next
to none, and the torch 2.13 facts the rule rests on (CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


def test_sdpa_reads_a_two_d_mask_as_queries_by_keys() -> None:
    torch.manual_seed(0)
    q = k = v = torch.randn(3, 2, 3, 8)  # batch == queries: the silent case
    keep = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
    # sequence 0 has no padding, yet its query 2 is denied keys 1 and 2 (row 2 of the mask)
    assert not torch.allclose(wrong[0], right[0])
    assert torch.allclose(wrong[0, :, 2], v[0, :, 0])
    with pytest.raises(RuntimeError):  # batch != queries: a broadcast error
        F.scaled_dot_product_attention(torch.randn(2, 2, 3, 8), torch.randn(2, 2, 3, 8),
                                       torch.randn(2, 2, 3, 8), attn_mask=keep[:2])


def test_mha_takes_a_two_d_attn_mask_as_queries_by_keys() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(3, 3, 8)
    pad = torch.tensor([[False, False, False], [False, False, True], [False, True, True]])
    with torch.no_grad():
        wrong, _ = mha(x, x, x, attn_mask=pad)  # accepted: batch == queries
        right, _ = mha(x, x, x, key_padding_mask=pad)
        assert not torch.allclose(wrong[0], right[0])  # sequence 0 gets others' padding
        with pytest.raises(RuntimeError, match="2D attn_mask"):
            mha(x[:2], x[:2], x[:2], attn_mask=pad[:2])


SDPA_DIRECT = """\
import torch.nn.functional as F

def attend(q, k, v, ids, pad_id):
    keep = ids != pad_id
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
"""


def test_a_pad_test_given_to_sdpa_as_it_is(found: Found) -> None:
    assert found(SDPA_DIRECT) == [(5, "MC515")]


@pytest.mark.parametrize("fixed", [
    "keep[:, None, None, :]", "keep.unsqueeze(1).unsqueeze(2)", "keep.view(b, 1, 1, -1)",
    "keep[:, None, :]", "keep.reshape(b, 1, 1, n)",
])
def test_the_mask_with_its_head_and_query_axes_is_silent(found: Found, fixed: str) -> None:
    assert found(SDPA_DIRECT.replace("attn_mask=keep", f"attn_mask={fixed}")) == []


def test_casts_and_inversions_keep_the_axes(found: Found) -> None:
    for spelled in ("keep.bool()", "keep.to(q.dtype)", "~keep"):
        src = SDPA_DIRECT.replace("attn_mask=keep", f"attn_mask={spelled}")
        assert (5, "MC515") in found(src), spelled


def test_a_lengths_test_and_a_tokenizer_mask(found: Found) -> None:
    lengths = SDPA_DIRECT.replace(
        "keep = ids != pad_id", "keep = torch.arange(ids.size(1))[None, :] < pad_id[:, None]")
    assert found("import torch\n" + lengths) == [(6, "MC515")]
    tokenized = """\
import torch.nn.functional as F

def encode(tokenizer, texts, q, k, v):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=batch["attention_mask"].bool())
"""
    assert found(tokenized) == [(5, "MC515")]


def test_a_parameter_of_unknown_shape_is_silent(found: Found) -> None:
    # a `mask` parameter may well be (batch, 1, 1, seq) already
    assert found("""\
import torch.nn.functional as F

def attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())
""") == []


HANDED_ON = """\
import torch.nn.functional as F

def attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool())

def encode(ids, q, k, v):
    keep = ids != 0
    return attend(q, k, v, keep)
"""


def test_a_function_that_hands_the_mask_on_as_it_is(found: Found) -> None:
    assert found(HANDED_ON) == [(8, "MC515")]


def test_a_function_that_adds_the_axes_itself_is_silent(found: Found) -> None:
    assert found(HANDED_ON.replace("attn_mask=mask.bool()",
                                   "attn_mask=mask[:, None, None, :].bool()")) == []
    # the caller adding them is silent too
    assert found(HANDED_ON.replace("attend(q, k, v, keep)",
                                   "attend(q, k, v, keep[:, None, None, :])")) == []


MHA = """\
import torch
from torch import nn

class Encoder(nn.Module):
    def __init__(self, dim, heads, pad_id):
        super().__init__()
        self.pad_id = pad_id
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x, ids):
        pad = ids == self.pad_id
        return self.attn(x, x, x, attn_mask=pad)[0]
"""


def test_a_padding_mask_as_mha_attn_mask(found: Found) -> None:
    assert found(MHA) == [(12, "MC515")]
    assert found(MHA.replace("attn_mask=pad", "key_padding_mask=pad")) == []


def test_a_causal_mask_as_attn_mask_is_silent(found: Found) -> None:
    causal = MHA.replace("pad = ids == self.pad_id", "n = ids.size(1)\n        pad = "
                         "torch.triu(torch.ones(n, n, dtype=torch.bool), 1)")
    assert found(causal) == []
