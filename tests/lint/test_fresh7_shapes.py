"""The false-alarm classes of the fresh7 precision set, each as the code shape it takes in real
code next to the buggy shape that must still be reported: an additive mask built from a list of
float32 tensors through pad_sequence/stack/cat (s3prl's downstream experts), and a large
negative fill of a torch.full whose dtype is an integer one (rl4co's FFSP schedule table)."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# s3prl downstream/atis/expert.py:115 (and five more experts): torch.ones is float32, so the
# padded mask is float32 and -1e5 fits; added to float16 logits it promotes (torch 2.13).
PADDED = '''import torch
from torch.nn.utils.rnn import pad_sequence


def forward(model, features):
    features_pad = pad_sequence(features, batch_first=True)
    attention_mask = [torch.ones((feature.shape[0])) for feature in features]
    attention_mask_pad = pad_sequence(attention_mask, batch_first=True)
    attention_mask_pad = (1.0 - attention_mask_pad) * -100000.0
    return model(features_pad, attention_mask_pad)
'''


def test_a_mask_padded_from_float32_ones_is_silent(found: Found) -> None:
    assert found(PADDED) == []


def test_the_same_mask_from_half_ones_is_still_reported(found: Found) -> None:
    half = PADDED.replace("torch.ones((feature.shape[0]))",
                          "torch.ones((feature.shape[0]), dtype=torch.float16)")
    assert found(half) == [(9, "MC501")]


def test_a_comprehension_of_the_masks_passed_in_is_still_reported(found: Found) -> None:
    # the loop name says nothing of its dtype, even when an outer name of the same spelling is
    # float32
    passed = PADDED.replace(
        "    attention_mask = [torch.ones((feature.shape[0])) for feature in features]\n",
        "    feature = torch.ones(3)\n"
        "    attention_mask = [feature for feature in features]\n")
    assert found(passed) == [(10, "MC501")]


def test_stack_and_cat_of_float32_parts_are_silent_and_of_mixed_parts_reported(
        found: Found) -> None:
    stacked = '''import torch


def bias(a, b):
    parts = [a.float(), b.float()]
    m = torch.stack(parts)
    m = (1.0 - m) * -1e9
    n = torch.cat((a.float(), b.float()), dim=0)
    n = (1.0 - n) * -1e9
    return m, n
'''
    assert found(stacked) == []
    mixed = stacked.replace("b.float()]", "b.half()]").replace("(a.float(), b.float())",
                                                               "(a.float(), b)")
    assert found(mixed) == [(7, "MC501"), (9, "MC501")]


# rl4co envs/scheduling/ffsp/env.py:279: an int64 table initialised to -999999.
INT_TABLE = '''import torch


def reset(batch_size, machines, jobs, device):
    schedule = torch.full(
        size=(batch_size, machines, jobs + 1),
        dtype=torch.long,
        device=device,
        fill_value=-999999,
    )
    return schedule
'''


def test_a_full_of_an_integer_dtype_is_silent(found: Found) -> None:
    assert found(INT_TABLE) == []
    assert found(INT_TABLE.replace("torch.long", "torch.int32")) == []


def test_the_same_full_in_float16_is_still_reported(found: Found) -> None:
    assert found(INT_TABLE.replace("torch.long", "torch.float16")) == [(9, "MC501")]
