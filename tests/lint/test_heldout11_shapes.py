"""Real code shapes behind the misses of the eleventh held-out recall set (written apart from the
engine from public reports cited nowhere else): each bad source next to the findings it must
give, its correct form next to none, and the torch facts they rest on (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# huggingface/transformers#1935: BERT's extended mask `(1.0 - m) * -10000.0` multiplied into the
# scores instead of added.
EXTENDED_MULTIPLIED = '''import torch


def self_attention(attention_scores, attention_mask):
    attention_scores = attention_scores * attention_mask
    return attention_scores.softmax(dim=-1)


def bert(attention_scores, attention_mask):
    extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
    extended_attention_mask = extended_attention_mask.to(dtype=torch.float32)
    extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0
    return self_attention(attention_scores, extended_attention_mask)
'''


def test_the_extended_mask_multiplied_into_the_scores_is_found(found: Found) -> None:
    assert found(EXTENDED_MULTIPLIED) == [(5, "MC523")]


def test_the_extended_mask_added_to_the_scores_is_silent(found: Found) -> None:
    assert found(EXTENDED_MULTIPLIED.replace("attention_scores * attention_mask",
                                             "attention_scores + attention_mask")) == []


def test_multiplying_by_the_extended_mask_zeroes_the_kept_scores() -> None:
    scores = torch.tensor([[2.0, 3.0, 4.0]])
    extended = (1.0 - torch.tensor([[1.0, 1.0, 0.0]])) * -10000.0
    assert (scores * extended).tolist() == [[0.0, 0.0, -40000.0]]
    assert (scores * extended).softmax(-1)[0, :2].sum() == 1.0  # the real keys lose their scores


# huggingface/transformers#5295: the tokenizer's 1 / 0 mask reaching `scores + mask` through
# `get_extended_attention_mask` (3-D and 2-D branches) without the `(1 - m) * -10000` step.
UNCONVERTED = '''import torch
from torch import nn


class ModuleUtilsMixin:
    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def get_extended_attention_mask(self, attention_mask):
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError("bad mask")
        extended_attention_mask = extended_attention_mask.to(dtype=self.dtype)
        return extended_attention_mask


class BertModel(nn.Module, ModuleUtilsMixin):
    def forward(self, scores, attention_mask):
        extended = self.get_extended_attention_mask(attention_mask)
        return (scores + extended).softmax(-1)
'''


def test_the_unconverted_extended_mask_added_is_found(found: Found) -> None:
    assert found(UNCONVERTED) == [(17, "MC508")]  # at the helper's cast


def test_the_converted_extended_mask_added_is_silent(found: Found) -> None:
    fixed = UNCONVERTED.replace(
        "        return extended_attention_mask",
        "        return (1.0 - extended_attention_mask) * -10000.0")
    assert found(fixed) == []


# pbloem/former#6: the diagonal masked too, through `mask_(dot, ..., mask_diagonal=True)`.
DIAGONAL_FLAG = '''import torch
import torch.nn.functional as F


def attend(dot):
    mask_(dot, maskval=float("-inf"), mask_diagonal=True)
    return F.softmax(dot, dim=2)


def mask_(matrices, maskval=0.0, mask_diagonal=True):
    b, h, w = matrices.size()
    indices = torch.triu_indices(h, w, offset=0 if mask_diagonal else 1)
    matrices[:, indices[0], indices[1]] = maskval
'''


def test_a_flag_that_keeps_the_diagonal_in_triu_indices_is_found(found: Found) -> None:
    assert found(DIAGONAL_FLAG) == [(12, "MC503")]


def test_the_flag_that_leaves_the_diagonal_out_is_silent(found: Found) -> None:
    assert found(DIAGONAL_FLAG.replace("mask_diagonal=True)\n    return",
                                       "mask_diagonal=False)\n    return")) == []


def test_triu_indices_with_offset_zero_empties_the_first_row() -> None:
    dot = torch.zeros(1, 3, 3)
    indices = torch.triu_indices(3, 3, offset=0)
    dot[:, indices[0], indices[1]] = float("-inf")
    assert torch.isnan(dot.softmax(dim=2)[0, 0]).all()


# zhouhaoyi/Informer2020#597: the mirrored triangle (`tril(..., diagonal=-1)`) held by a mask
# class and read through its property.
MASK_PROPERTY = '''import numpy as np
import torch


class TriangularCausalMask():
    def __init__(self, B, L, device="cpu"):
        with torch.no_grad():
            self._mask = torch.tril(torch.ones([B, 1, L, L], dtype=torch.bool), diagonal=-1)

    @property
    def mask(self):
        return self._mask


def attend(scores, B, L, attn_mask=None):
    if attn_mask is None:
        attn_mask = TriangularCausalMask(B, L)
        scores.masked_fill_(attn_mask.mask, -np.inf)
    return torch.softmax(scores, dim=-1)
'''


def test_the_mirrored_triangle_read_through_a_property_is_found(found: Found) -> None:
    assert found(MASK_PROPERTY) == [(18, "MC521")]


def test_the_project_triangle_read_through_the_property_is_silent(found: Found) -> None:
    assert found(MASK_PROPERTY.replace("torch.tril(", "torch.triu(").replace(
        "diagonal=-1", "diagonal=1")) == []


def test_a_method_is_not_read_as_a_property(found: Found) -> None:
    assert found(MASK_PROPERTY.replace("    @property\n", "")) == []


# discuss.huggingface.co/t/1538: the 1 / 0 mask multiplied into the scores, with the model's
# `if attention_mask is None: attention_mask = torch.ones_like(input_ids)` default.
NONE_DEFAULT = '''import torch
import torch.nn.functional as F


def attend(scores, attention_mask):
    scores = scores * attention_mask
    return F.softmax(scores, dim=-1)


def model(scores, input_ids, attention_mask=None):
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    extended = attention_mask[:, None, None, :].to(dtype=torch.float32)
    return attend(scores, extended)
'''


def test_the_keep_mask_multiplied_after_a_none_default_is_found(found: Found) -> None:
    assert found(NONE_DEFAULT) == [(6, "MC520")]


def test_the_keep_mask_added_as_0_and_minus_inf_after_a_none_default_is_silent(
        found: Found) -> None:
    fixed = NONE_DEFAULT.replace("    scores = scores * attention_mask\n",
                                 "    scores = scores.masked_fill(attention_mask == 0, "
                                 "float('-inf'))\n")
    assert found(fixed) == []


def test_a_default_that_is_a_real_mask_still_counts(found: Found) -> None:
    source = '''import torch


def attend(scores, mask=None):
    if mask is None:
        mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1) == 0
    return scores.masked_fill(mask, float("-inf")).softmax(-1)
'''
    assert found(source) == [(7, "MC521")]


# karpathy/nanochat PR #456: one new query against a KV cache with is_causal=True (top-left
# alignment: it sees only the first cached key); the branches without a cached prefix are right.
KV_CACHE_DECODE = '''import torch
import torch.nn.functional as F


def attend(q, k, v, kv_cache, layer_idx):
    if kv_cache is not None:
        k, v = kv_cache.insert_kv(layer_idx, k, v)
    Tq = q.size(2)
    Tk = k.size(2)
    if kv_cache is None or Tq == Tk:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif Tq == 1:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None)
    return y
'''


def test_one_query_against_the_cache_with_is_causal_is_found(found: Found) -> None:
    assert found(KV_CACHE_DECODE) == [(13, "MC510")]


def test_one_query_against_the_cache_without_is_causal_is_silent(found: Found) -> None:
    fixed = KV_CACHE_DECODE.replace("    elif Tq == 1:\n        y = F.scaled_dot_product_attention("
                                    "q, k, v, is_causal=True)",
                                    "    elif Tq == 1:\n        y = F.scaled_dot_product_attention("
                                    "q, k, v, is_causal=False)")
    assert found(fixed) == []


def test_is_causal_with_one_query_sees_only_the_first_key() -> None:
    q, k = torch.randn(1, 1, 1, 4), torch.randn(1, 1, 5, 4)
    v = torch.eye(5).view(1, 1, 5, 5)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.flatten().tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_unpacked_triu_indices_with_offset_zero_are_found(found: Found) -> None:
    source = '''import torch
import torch.nn.functional as F


def attend(dot):
    b, h, w = dot.size()
    i, j = torch.triu_indices(h, w)
    dot[:, i, j] = float("-inf")
    return F.softmax(dot, dim=2)
'''
    assert found(source) == [(8, "MC503")]
    assert found(source.replace("triu_indices(h, w)", "triu_indices(h, w, offset=1)")) == []
