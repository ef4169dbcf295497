"""Real code shapes behind the misses of the fifteenth held-out recall set (bugs in realistic
project modules, written apart from the engine): each bad source next to the findings it must
give, its correct form next to none (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# CLIP's build_attention_mask, in place: fill_ with -inf, then triu_ with the default diagonal.
CLIP_MASK = '''import torch


def build_attention_mask(context_length):
    mask = torch.empty(context_length, context_length)
    mask.fill_(float("-inf"))
    mask.triu_()
    return mask
'''


def test_an_in_place_triu_of_a_filled_matrix_is_found(found: Found) -> None:
    assert found(CLIP_MASK) == [(7, "MC503")]


def test_the_in_place_triu_above_the_diagonal_is_silent(found: Found) -> None:
    assert found(CLIP_MASK.replace("mask.triu_()", "mask.triu_(1)")) == []


def test_a_zero_filled_matrix_is_silent(found: Found) -> None:
    assert found(CLIP_MASK.replace('float("-inf")', "0.0")) == []


def test_triu_with_diagonal_zero_hides_the_first_token_from_itself() -> None:
    mask = torch.empty(3, 3).fill_(float("-inf")).triu_()
    weights = torch.softmax(torch.zeros(3, 3) + mask, dim=-1)
    assert torch.isnan(weights[0]).all()


# A TrOCR-style decoder inverts the collated decoder mask (int64, 1 = real token).
DECODER_MASK = '''import torch


def forward(decoder, batch, memory):
    decoder_attention_mask = batch["decoder_attention_mask"]
    pad = ~decoder_attention_mask[:, :-1]
    return decoder(memory, tgt_key_padding_mask=pad)
'''


def test_inverting_a_collated_decoder_mask_is_found(found: Found) -> None:
    assert found(DECODER_MASK) == [(6, "MC518")]


@pytest.mark.parametrize("fixed", ["decoder_attention_mask[:, :-1] == 0",
                                   "~decoder_attention_mask[:, :-1].bool()"])
def test_the_comparison_or_a_bool_cast_is_silent(found: Found, fixed: str) -> None:
    assert found(DECODER_MASK.replace("~decoder_attention_mask[:, :-1]", fixed)) == []


def test_bitwise_not_of_an_int64_mask_is_never_false() -> None:
    keep = torch.tensor([[1, 1, 0]])
    assert (~keep).tolist() == [[-2, -2, -1]]
    assert (~keep).bool().all()


# agilerl's BERT encoder compares its mask with a -inf causal matrix made from ones.
ONES_TIMES_INF = '''import torch


def causal_comparison(src_mask):
    sz = src_mask.size(0)
    return torch.triu(torch.ones(sz, sz, device=src_mask.device) * float("-inf"), diagonal=1)
'''


def test_ones_times_minus_infinity_is_not_zero_times_infinity(found: Found) -> None:
    assert found(ONES_TIMES_INF) == []
    zero_one = ONES_TIMES_INF.replace(
        'torch.triu(torch.ones(sz, sz, device=src_mask.device) * float("-inf"), diagonal=1)',
        'torch.triu(torch.ones(sz, sz, device=src_mask.device), diagonal=1) * float("-inf")')
    assert found(zero_one) == [(6, "MC522")]


def test_ones_times_minus_infinity_holds_no_nan() -> None:
    product = torch.ones(3, 3) * float("-inf")
    assert not torch.isnan(product).any()
    assert torch.isnan(torch.triu(torch.ones(3, 3), diagonal=1) * float("-inf")).any()
