"""MC520 on a Hugging Face `attention_mask` (1 = real token, 0 = padding) multiplied into the
logits before softmax, known by its name alone as MC502 knows it: a padded logit becomes 0,
not -inf, and keeps weight exp(0). Each bad source next to the finding it must give, its
correct forms next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

BAD = """\
import torch

def attend(scores, attention_mask):
    scores = scores * attention_mask[:, None, None, :]
    return scores.softmax(-1)
"""


def test_logits_times_an_hf_attention_mask_before_softmax(found: Found) -> None:
    assert found(BAD) == [(4, "MC520")]


def test_the_mask_applied_after_softmax_or_as_a_fill_is_silent(found: Found) -> None:
    after = """\
import torch

def attend(scores, attention_mask):
    weights = scores.softmax(-1) * attention_mask[:, None, None, :]
    return weights / weights.sum(-1, keepdim=True)
"""
    filled = BAD.replace("scores * attention_mask[:, None, None, :]",
                         "scores.masked_fill(attention_mask[:, None, None, :] == 0, -1e4)")
    assert found(after) == []
    assert found(filled) == []


def test_a_rebound_attention_mask_is_read_by_what_it_holds(found: Found) -> None:
    # turned into an additive mask in the function: multiplying by it is MC523, not MC520
    additive = "    attention_mask = (1.0 - attention_mask) * -1e4\n"
    rebound = BAD.replace("    scores = scores *", additive + "    scores = scores *")
    assert found(rebound) == [(5, "MC523")]


def test_a_padded_logit_multiplied_by_zero_keeps_its_weight() -> None:
    logits = torch.tensor([[3.0, 1.0, 4.0]])
    attention_mask = torch.tensor([[1, 1, 0]])
    weights = (logits * attention_mask).softmax(-1)
    assert weights[0, 2] > 0.03  # exp(0) next to exp(3) and exp(1)
    filled = logits.masked_fill(attention_mask == 0, float("-inf")).softmax(-1)
    assert filled[0, 2] == 0


def test_a_reshaped_attention_mask_is_still_read_by_its_name(found: Found) -> None:
    reshaped = BAD.replace("attention_mask[:, None, None, :]",
                           "attention_mask.unsqueeze(1).unsqueeze(2)")
    assert found(reshaped) == [(4, "MC520")]


def test_a_dict_entry_handed_on_by_name_is_not_read_by_its_name(found: Found) -> None:
    # `self.backbone(features)` may rewrite the entry: only a name keeps its convention
    entry = """\
import torch

def score(self, features, emb):
    self.backbone(features)
    logits = self.cls(emb).squeeze(-1) * features["attention_mask"]
    return logits.softmax(-1)
"""
    assert found(entry) == []
