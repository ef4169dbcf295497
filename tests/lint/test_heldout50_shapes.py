"""Shapes of held-out 50 (session 30, scripts exported from notebooks): the bad source next to
the finding it must give, its correct form next to none, and the torch 2.13 fact it rests
on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# The beehive scorer: the rows with a missing reading, `x.isnan().any(-1)`, handed to the
# attention as its bias and added to the scores.
MISSING_ROWS_AS_BIAS = """\
import torch
import torch.nn as nn


class HiveAttention(nn.Module):
    def forward(self, h, bias):
        scores = h @ h.transpose(-2, -1)
        scores = scores + bias
        return scores.softmax(-1) @ h


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = HiveAttention()

    def forward(self, x):
        missing = x.isnan().any(-1)
        h = torch.nan_to_num(x)
        bias = missing[:, None, :]
        return self.attn(h, bias)
"""


def test_rows_with_a_missing_reading_are_a_bool_mask(found: Found) -> None:
    added = line_of(MISSING_ROWS_AS_BIAS, "scores = scores + bias")
    assert found(MISSING_ROWS_AS_BIAS) == [(added, "MC509")]
    fixed = MISSING_ROWS_AS_BIAS.replace(
        "bias = missing[:, None, :]",
        "bias = torch.zeros_like(x[..., 0]).masked_fill(missing, float('-inf'))[:, None, :]")
    assert found(fixed) == []


def test_adding_a_bool_mask_to_scores_adds_one() -> None:
    scores = torch.zeros(1, 3)
    missing = torch.tensor([[False, False, True]])
    assert torch.equal(scores + missing, torch.tensor([[0.0, 0.0, 1.0]]))


# The tree-ring cores: the collate function pads the ring widths with `pad_sequence`, tests
# them against 0 and subtracts the bool from 1.
PADDED_WIDTHS = """\
import torch
from torch.nn.utils.rnn import pad_sequence


def collate_cores(batch):
    widths = pad_sequence([s for s, _ in batch], batch_first=True, padding_value=0.0)
    valid = widths > 0
    missing = 1 - valid
    labels = torch.tensor([r for _, r in batch])
    return widths, missing, labels
"""


def test_a_comparison_of_padded_sequences_is_a_bool_tensor(found: Found) -> None:
    subtracted = line_of(PADDED_WIDTHS, "missing = 1 - valid")
    assert found(PADDED_WIDTHS) == [(subtracted, "MC512")]
    fixed = PADDED_WIDTHS.replace("missing = 1 - valid", "missing = ~valid")
    assert found(fixed) == []


def test_one_minus_a_bool_tensor_raises() -> None:
    valid = torch.nn.utils.rnn.pad_sequence([torch.ones(2), torch.ones(1)], batch_first=True) > 0
    with pytest.raises(RuntimeError, match="Subtraction"):
        _ = 1 - valid


# The fisheries classifier: the batch's `key_padding_mask` (True = padding) reaches SDPA under
# that name. MC502 says so at the use; the calls that hand the batch field to the model are
# not a second finding.
KEY_PADDING_HANDED_DOWN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0


def collate(ids):
    return {"input_ids": ids, "key_padding_mask": ids == PAD_ID}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)

    def pool(self, h, key_padding_mask):
        q = h.mean(1, keepdim=True)[:, None]
        return F.scaled_dot_product_attention(q, h[:, None], h[:, None],
                                              attn_mask=key_padding_mask[:, None, None, :])

    def forward(self, input_ids, key_padding_mask):
        return self.pool(self.embed(input_ids), key_padding_mask)


def train(model, ids):
    batch = collate(ids)
    return model(batch["input_ids"], batch["key_padding_mask"])


def main(ids):
    train(Classifier(), ids)
"""


def test_a_key_padding_mask_handed_down_to_sdpa_is_reported_once(found: Found) -> None:
    use = line_of(KEY_PADDING_HANDED_DOWN, "attn_mask=key_padding_mask[:, None, None, :]")
    assert found(KEY_PADDING_HANDED_DOWN) == [(use, "MC502")]
    fixed = KEY_PADDING_HANDED_DOWN.replace("attn_mask=key_padding_mask[:, None, None, :]",
                                            "attn_mask=~key_padding_mask[:, None, None, :]")
    assert found(fixed) == []


def test_under_another_name_the_call_that_hands_it_down_is_reported(found: Found) -> None:
    renamed = KEY_PADDING_HANDED_DOWN.replace(
        "def pool(self, h, key_padding_mask):", "def pool(self, h, mask):").replace(
        "attn_mask=key_padding_mask[:, None, None, :]", "attn_mask=mask[:, None, None, :]")
    assert [code for _, code in found(renamed)] == ["MC511"]
