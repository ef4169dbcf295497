"""The false-alarm classes of the fresh7 precision set, each as the code shape it takes in real
code next to the buggy shape that must still be reported: an additive mask built from a list of
float32 tensors through pad_sequence/stack/cat (s3prl's downstream experts), and a large
negative fill of a torch.full whose dtype is an integer one (rl4co's FFSP schedule table), and a
large negative subtracted from or written into a head's output logits or a pooled sequence, which
float16 turns into -inf without raising (DI-engine's action masks, deepctr's max pooling)."""

from __future__ import annotations

from collections.abc import Callable

import torch

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
    assert found(passed + HALF_NOTE) == [(10, "MC501")]


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


# DI-engine ding/model/wrapper/model_wrappers.py:437 and template/havac.py:379: action logits
# masked with a large negative before argmax, by subtraction and by an indexed write.
ACTION_LOGITS = '''import torch


def pick(logit, mask):
    logit = logit.sub_(1e8 * (1 - mask))
    return logit.argmax(dim=-1)


def head(x, action_mask):
    logit = x["logit"]
    logit[action_mask == 0.0] = -99999999
    return logit
'''


def test_large_negatives_written_into_action_logits_are_silent(found: Found) -> None:
    assert found(ACTION_LOGITS) == []


def test_the_same_writes_into_attention_scores_are_reported(found: Found) -> None:
    source = ACTION_LOGITS.replace("    logit = logit.sub_", "    scores = scores.sub_").replace(
        "return logit.argmax", "return scores.softmax").replace(
        "def pick(logit,", "def pick(scores,").replace(
        'logit = x["logit"]', 'scores = x["logit"]').replace(
        "    logit[action_mask", "    scores[action_mask").replace(
        "    return logit\n", "    return scores\n")
    assert found(source + HALF_NOTE) == [(5, "MC501"), (11, "MC501")]
    assert found(source) == []  # non-raising, and float16 nowhere in the file


# deepctr-torch layers/sequence.py:66: max pooling over a sequence with the padding pushed down.
MAX_POOLING = '''import torch


def pool(seq_embed, mask):
    hist = seq_embed - (1 - mask) * 1e9
    return torch.max(hist, dim=1, keepdim=True)[0]
'''


def test_a_max_pooling_sentinel_is_silent(found: Found) -> None:
    assert found(MAX_POOLING) == []


def test_the_same_difference_in_attention_code_is_reported(found: Found) -> None:
    named = MAX_POOLING.replace("def pool(", "def attention_pool(")
    assert found(named + HALF_NOTE) == [(5, "MC501")]
    softmaxed = MAX_POOLING.replace("torch.max(hist, dim=1, keepdim=True)[0]",
                                    "hist.softmax(dim=-1)")
    assert found(softmaxed + HALF_NOTE) == [(5, "MC501")]
    assert found(softmaxed) == []  # non-raising, and float16 nowhere in the file


HALF_NOTE = "\n# This model runs in float16 (model.half()): what makes the -inf below reachable.\n"


def test_those_writes_give_minus_inf_in_float16_without_raising() -> None:
    logit = torch.zeros(2, 3, dtype=torch.float16)
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]], dtype=torch.float16)
    assert torch.isneginf(logit.clone().sub_(1e8 * (1 - mask))).sum().item() == 2
    written = logit.clone()
    written[mask == 0.0] = -99999999
    assert torch.isneginf(written).sum().item() == 2
