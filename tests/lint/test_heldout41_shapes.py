"""The shapes of held-out 41 (math verifiers, pose lifting, sign language translation) that its
first reading missed, each bad source next to the findings it must give, its correct form next
to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# transformers 4.35's AttentionMaskConverter: the causal plane gets a prefix of zeros for the
# cached keys, bound to a name that says cache (`past`), before the two planes are added.
SUMMED_PLANES_WITH_A_CACHE_PREFIX = """\
import torch


class AttentionMaskConverter:
    def to_4d(self, attention_mask_2d, query_length, dtype, key_value_length):
        input_shape = (attention_mask_2d.shape[0], query_length)
        past_key_values_length = key_value_length - query_length
        causal_4d_mask = None
        if input_shape[-1] > 1:
            causal_4d_mask = self._make_causal_mask(input_shape, dtype, past_key_values_length)
        expanded = self._expand_mask(attention_mask_2d, dtype, tgt_len=input_shape[-1])
        return expanded if causal_4d_mask is None else expanded + causal_4d_mask

    @staticmethod
    def _make_causal_mask(input_ids_shape, dtype, past_key_values_length=0):
        bsz, tgt_len = input_ids_shape
        mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
        cond = torch.arange(mask.size(-1))
        mask.masked_fill_(cond < (cond + 1).view(mask.size(-1), 1), 0)
        if past_key_values_length > 0:
            past = torch.zeros(tgt_len, past_key_values_length, dtype=dtype)
            mask = torch.cat([past, mask], dim=-1)
        return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)

    @staticmethod
    def _expand_mask(mask, dtype, tgt_len):
        bsz, src_len = mask.size()
        expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
        inverted = 1.0 - expanded
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)
"""


def test_two_finfo_min_planes_sum_to_minus_inf() -> None:
    low = torch.finfo(torch.float16).min
    planes = torch.full((2,), low, dtype=torch.float16)
    assert torch.isinf(planes + planes).all()
    past = torch.zeros(1, 2, dtype=torch.float16)
    assert (torch.cat([past, planes[None]], dim=-1) == low).sum() == 2  # the prefix keeps them


def test_summed_planes_with_a_zeros_prefix_named_past(found: Found) -> None:
    assert found(SUMMED_PLANES_WITH_A_CACHE_PREFIX) == [(12, "MC513")]
    fixed = SUMMED_PLANES_WITH_A_CACHE_PREFIX.replace(
        "expanded + causal_4d_mask",
        "causal_4d_mask.masked_fill(expanded.bool(), torch.finfo(dtype).min)")
    assert found(fixed) == []


def test_keys_after_a_cache_still_read_as_cached(found: Found) -> None:
    # a cache prefix that is not zeros (the cached keys themselves) keeps L != S (MC510)
    source = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, past_keys, past_values):
    k = torch.cat([past_keys, k], dim=2)
    v = torch.cat([past_values, v], dim=2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
"""
    assert found(source) == [(8, "MC510")]


# MixSTE's causal option: the additive triangle is registered on one branch and None on the
# other, and the attention multiplies its weights by it.
OPTIONAL_ADDITIVE_BUFFER_MULTIPLIED = """\
import torch
from torch import nn


def causal_temporal_bias(n):
    return torch.triu(torch.full((n, n), float("-inf")), diagonal=1)


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x, attn_bias=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        if attn_bias is not None:
            attn = attn * attn_bias
        return attn @ v


class Lifter(nn.Module):
    def __init__(self, dim, depth, frames, causal=False):
        super().__init__()
        self.blocks = nn.ModuleList([Attention(dim) for _ in range(depth)])
        if causal:
            self.register_buffer("temporal_bias", causal_temporal_bias(frames), persistent=False)
        else:
            self.temporal_bias = None

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x, attn_bias=self.temporal_bias)
        return x
"""


def test_multiplying_by_an_additive_mask_gives_nan() -> None:
    weights = torch.full((2, 2), 0.5)
    bias = torch.triu(torch.full((2, 2), float("-inf")), diagonal=1)
    product = weights * bias
    assert product[1, 0] == 0 and torch.isneginf(product[0, 1])  # kept zeroed, masked -inf
    assert torch.isnan(product @ torch.zeros(2, 2)).any()  # and -inf * 0 is NaN


def test_an_additive_buffer_registered_on_one_branch_and_multiplied(found: Found) -> None:
    assert found(OPTIONAL_ADDITIVE_BUFFER_MULTIPLIED) == [(18, "MC523")]
    fixed = OPTIONAL_ADDITIVE_BUFFER_MULTIPLIED.replace(
        "attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)\n        if attn_bias is not None:\n"
        "            attn = attn * attn_bias",
        "attn = q @ k.transpose(-2, -1)\n        if attn_bias is not None:\n"
        "            attn = attn + attn_bias\n        attn = attn.softmax(dim=-1)")
    assert found(fixed) == []


def test_an_attribute_set_to_none_last_is_still_none_elsewhere(found: Found) -> None:
    # only a None beside a mask the class already holds is passed over; a plain None is not
    # a mask, and nothing is reported for it
    source = OPTIONAL_ADDITIVE_BUFFER_MULTIPLIED.replace(
        'self.register_buffer("temporal_bias", causal_temporal_bias(frames), persistent=False)',
        "self.temporal_bias = None")
    assert found(source) == []


# JoeyNMT's decoder (Sign Language Transformers): the look-ahead helper returns the upper
# triangle itself (its `== 0` dropped), AND-ed with the target's padding keep-mask, and the
# attention fills where the mask is False.
UPPER_TRIANGLE_AND_PADDING_AS_KEEP = """\
import torch
from torch import nn


def subsequent_mask(size):
    ones = torch.ones(1, size, size, dtype=torch.bool)
    return torch.triu(ones, diagonal=1)


class MultiHeadedAttention(nn.Module):
    def forward(self, k, v, q, mask=None):
        scores = q @ k.transpose(-1, -2)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(-1) @ v


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = MultiHeadedAttention()

    def forward(self, x, trg_mask):
        trg_mask = trg_mask & subsequent_mask(x.size(1)).type_as(trg_mask)
        return self.att(x, x, x, mask=trg_mask)
"""


def test_an_upper_triangle_as_a_keep_mask_shows_the_future() -> None:
    keep = torch.ones(1, 3, 3, dtype=torch.bool) & torch.triu(
        torch.ones(1, 3, 3, dtype=torch.bool), diagonal=1)
    scores = torch.zeros(1, 3, 3).masked_fill(~keep, float("-inf"))
    weights = scores.softmax(-1)
    assert weights[0, 0, 2] > 0  # the first token sees the last one
    assert torch.isnan(weights[0, 2]).all()  # and the last sees nothing, itself included


def test_an_upper_triangle_anded_with_the_padding_as_a_keep_mask(found: Found) -> None:
    assert found(UPPER_TRIANGLE_AND_PADDING_AS_KEEP) == [(7, "MC521")]
    fixed = UPPER_TRIANGLE_AND_PADDING_AS_KEEP.replace(
        "return torch.triu(ones, diagonal=1)", "return torch.triu(ones, diagonal=1) == 0")
    assert found(fixed) == []
    lower = UPPER_TRIANGLE_AND_PADDING_AS_KEEP.replace(
        "return torch.triu(ones, diagonal=1)", "return torch.tril(ones)")
    assert found(lower) == []
