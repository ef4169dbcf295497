"""MC514: a (batch, seq) padding mask laid out as (batch, 1, seq, 1) (hyunwoongko/transformer
PR #40, bentrevett/pytorch-seq2seq#96), and what `self.method(...)` gives when the method is
defined below its call. Each bad source next to the findings it must give, its correct form
next to none, and the torch 2.13 fact the rule rests on (CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


def _fill(mask: torch.Tensor) -> torch.Tensor:
    scores = torch.zeros(1, 1, 4, 4)
    return scores.masked_fill(mask == 0, -10000.0).softmax(-1)


def test_the_query_axis_layout_leaves_the_padding_keys_visible() -> None:
    src = torch.tensor([[5, 7, 0, 0]])
    rows = _fill((src != 0).unsqueeze(1).unsqueeze(3))
    assert rows[0, 0, 0, 3] == pytest.approx(0.25)  # a real query weighs a padding key
    assert torch.allclose(rows[0, 0, 2], torch.full((4,), 0.25))  # padded query rows uniform
    keys = _fill((src != 0).unsqueeze(1).unsqueeze(2))
    assert keys[0, 0, 0, 3] == 0  # on the key axis the padding keys get no weight


def test_sdpa_with_the_query_axis_mask_lets_real_queries_see_padding() -> None:
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 4, 8)
    src = torch.tensor([[5, 7, 0, 0]])
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=(src != 0)[:, None, :, None])
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=(src != 0)[:, None, None, :])
    unmasked = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(wrong[0, 0, 0], unmasked[0, 0, 0])  # query 0 sees all four keys
    assert not torch.allclose(right[0, 0, 0], unmasked[0, 0, 0])


# The shape of hyunwoongko/transformer before PR #40: `make_src_mask` defined below `forward`,
# the mask handed down two modules to the attention that fills.
MODEL = '''import math
from torch import nn


class ScaleDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        score = q @ k.transpose(2, 3) / math.sqrt(k.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        return score.softmax(-1) @ v


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = ScaleDotProductAttention()

    def forward(self, x, src_mask):
        return self.attention(x, x, x, mask=src_mask)


class Transformer(nn.Module):
    def __init__(self, src_pad_idx):
        super().__init__()
        self.src_pad_idx = src_pad_idx
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(2)])

    def forward(self, src, x):
        src_mask = self.make_src_mask(src)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x

    def make_src_mask(self, src):
        return (src != self.src_pad_idx).unsqueeze(1).unsqueeze(3)
'''


def test_reported_where_the_mask_is_made(found: Found) -> None:
    assert found(MODEL) == [(35, "MC514")]


def test_the_key_axis_mask_is_silent(found: Found) -> None:
    assert found(MODEL.replace("unsqueeze(3)", "unsqueeze(2)")) == []


def test_a_mask_turned_onto_the_key_axis_is_silent(found: Found) -> None:
    assert found(MODEL.replace("unsqueeze(1).unsqueeze(3)",
                               "unsqueeze(1).unsqueeze(3).transpose(2, 3)")) == []


def test_a_fill_of_features_is_silent(found: Found) -> None:
    # (B, C, T, F) features masked by time before a max over time take (B, 1, T, 1) on purpose
    assert found(MODEL.replace("score", "feat").replace("return feat.softmax(-1) @ v",
                                                        "return feat.amax(dim=2)")) == []


@pytest.mark.parametrize("spelling", [
    "(src != pad)[:, None, :, None]",
    "(src != pad).unsqueeze(-1).unsqueeze(1)",
    "(src != pad).unsqueeze(1).unsqueeze(-1)",
    "(src != pad)[:, None, :].unsqueeze(-1)",
    "(src != pad)[:, None][..., None]",
])
def test_each_spelling_of_the_query_axis(found: Found, spelling: str) -> None:
    source = ("import torch\n\n\ndef f(src, pad, scores):\n"
              f"    m = {spelling}\n"
              "    return scores.masked_fill(m == 0, float('-inf')).softmax(-1)\n")
    assert found(source) == [(5, "MC514")]


@pytest.mark.parametrize("spelling", [
    "(src != pad)[:, None, None, :]",
    "(src != pad).unsqueeze(1).unsqueeze(2)",
    "(src != pad).unsqueeze(-2).unsqueeze(1)",
    "(src != pad)[:, None, :, None].view(b, 1, 1, -1)",
    "(src.unsqueeze(1) != pad).unsqueeze(3)",
    "(src != pad)[:, 0, None, None]",
])
def test_each_spelling_of_the_key_axis_or_unknown(found: Found, spelling: str) -> None:
    source = ("import torch\n\n\ndef f(src, pad, scores, b):\n"
              f"    m = {spelling}\n"
              "    return scores.masked_fill(m == 0, float('-inf')).softmax(-1)\n")
    assert found(source) == []


# A method called above its definition gives what its returns give, as a method defined above
# does: here a bool tensor, which added to the scores masks nothing (MC509).
BELOW = '''import torch
from torch import nn


class Scorer(nn.Module):
    def forward(self, scores, ids):
        keep = self.keep_mask(ids)
        return (scores + keep).softmax(-1)

    def keep_mask(self, ids):
        return ids != 0
'''


def test_a_method_below_its_call_gives_its_returns(found: Found) -> None:
    assert found(BELOW) == [(8, "MC509")]


def test_as_a_method_above_its_call_does(found: Found) -> None:
    method = "    def keep_mask(self, ids):\n        return ids != 0\n"
    above = BELOW.replace("\n" + method, "").replace(
        "class Scorer(nn.Module):\n", "class Scorer(nn.Module):\n" + method + "\n")
    assert found(above) == [(11, "MC509")]


def test_a_bool_added_to_scores_masks_nothing() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[True, True, False]])
    assert (scores + keep).softmax(-1)[0, 2] > 0.1  # the padding keeps its weight
