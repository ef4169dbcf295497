"""The shapes of held-out 35 (code, retrieval, translation and classic NLP) that its first
reading missed, each bad source next to the findings it must give, its correct form next to
none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# OpenNMT-py's decoder builds its look-ahead mask with the in-place `tril_()`/`triu_(1)`.
LOOK_AHEAD = """\
import torch


def attend(scores, n):
    future = torch.ones(n, n, dtype=torch.bool).tril_()
    return scores.masked_fill(future, float("-inf")).softmax(-1)
"""


def test_the_in_place_triangle_returns_the_triangle() -> None:
    ones = torch.ones(3, 3, dtype=torch.bool)
    assert torch.equal(ones.clone().tril_(), ones.tril())
    weights = torch.zeros(3, 3).masked_fill(ones.clone().tril_(), float("-inf")).softmax(-1)
    assert weights[0, 0] == 0 and weights[0, 1:].sum() == 1  # the first query sees the future
    assert torch.isnan(weights[2]).all()  # and the last hides every key


def test_an_in_place_triangle_is_a_triangle(found: Found) -> None:
    assert found(LOOK_AHEAD) == [(6, "MC521")]
    assert found(LOOK_AHEAD.replace("tril_()", "triu_(1)")) == []


# BART's attention takes `is_causal` per instance: the decoder's self-attention is built with
# it True and is handed the decoder's padding mask all the same.
INSTANCE_FLAG = """\
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, is_causal=False):
        super().__init__()
        self.is_causal = is_causal

    def forward(self, q, k, v, attention_mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask,
                                              is_causal=self.is_causal)


class Layer(nn.Module):
    def __init__(self, d, is_decoder):
        super().__init__()
        self.self_attn = Attention(d, is_causal=is_decoder)
        self.cross_attn = Attention(d) if is_decoder else None

    def forward(self, x, mask, memory, memory_mask):
        x = self.self_attn(x, x, x, SELF_MASK)
        return self.cross_attn(x, memory, memory, memory_mask)


class Stack(nn.Module):
    def __init__(self, d, is_decoder):
        super().__init__()
        self.layers = nn.ModuleList([Layer(d, is_decoder) for _ in range(2)])


encoder = Stack(8, is_decoder=False)
decoder = Stack(8, is_decoder=DECODER)
"""


def test_sdpa_refuses_a_mask_with_is_causal_on_the_math_backend() -> None:
    q = torch.zeros(1, 1, 2, 4)
    keep = torch.ones(1, 1, 1, 2, dtype=torch.bool)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        try:
            torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=keep,
                                                             is_causal=True)
        except RuntimeError as error:
            assert "is_causal" in str(error)
        else:
            raise AssertionError("SDPA took attn_mask with is_causal=True")


def test_an_instance_flag_true_on_an_instance_given_a_mask(found: Found) -> None:
    bad = INSTANCE_FLAG.replace("SELF_MASK", "mask").replace("DECODER", "True")
    assert found(bad) == [(11, "MC506")]
    # no instance built with the flag True, or the causal one never given a mask: silent
    assert found(bad.replace("is_decoder=True", "is_decoder=False")) == []
    assert found(INSTANCE_FLAG.replace("SELF_MASK", "None").replace("DECODER", "True")) == []


# OpenNMT-py's `_compute_dec_mask` returns the padding mask OR-ed with its look-ahead triangle
# on one path and the padding mask alone on the other.
ONE_PATH_TRIANGLE = """\
import torch


def dec_mask(pad, future):
    n = pad.size(-1)
    if not future:
        look_ahead = torch.ones(n, n, dtype=torch.bool).tril_()
        return pad | look_ahead
    return pad


def attend(scores, ids, future=False):
    pad = (ids == 0)[:, None, :]
    return scores.masked_fill(dec_mask(pad, future), float("-inf")).softmax(-1)
"""


def test_a_triangle_returned_on_one_path_is_read_where_it_is_filled(found: Found) -> None:
    assert found(ONE_PATH_TRIANGLE) == [(7, "MC521")]
    assert found(ONE_PATH_TRIANGLE.replace("tril_()", "triu_(1)")) == []


# ColBERT's encoder inverts the tokenizer's mask (`.eq(0)`) and hands it to its layers under the
# same name, which give it to SDPA as the bool attn_mask (True = may attend).
INVERTED_HANDED_DOWN = """\
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def forward(self, h, attention_mask):
        return F.scaled_dot_product_attention(h, h, h, attn_mask=attention_mask)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = SelfAttention()

    def forward(self, h, attention_mask):
        return self.attention(h, attention_mask)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, input_ids, attention_mask):
        h = input_ids
        extended = attention_mask.eq(0)[:, None, None, :]
        for layer in self.layers:
            h = layer(h, extended)
        return h
"""


def test_an_inverted_mask_handed_down_under_its_name_is_reported_where_inverted(
        found: Found) -> None:
    assert found(INVERTED_HANDED_DOWN) == [(26, "MC511")]
    assert found(INVERTED_HANDED_DOWN.replace(".eq(0)", ".ne(0)")) == []
    # handed on as it came (no inversion here): the wrapper is not where it goes wrong
    assert found(INVERTED_HANDED_DOWN.replace("attention_mask.eq(0)[:, None, None, :]",
                                              "attention_mask[:, None, None, :]")) == []



# CodeT5's demo: a tokenizer class returns int64 masks in a dict, the training loop adds the
# labels to the dict before `model(**batch)`, and generation calls `model.generate(ids, mask)`;
# the model's `invert_attention_mask` applies `~` to what every call gives it.
INT_MASK_BATCH = """\
import torch
from torch import nn


class Tokenizer:
    def __call__(self, texts):
        ids = [[1, 2, 0], [3, 0, 0]]
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.tensor([[int(i > 0) for i in r] for r in ids],
                                           dtype=torch.long),
        }


def invert_attention_mask(mask, dtype):
    extended = mask[:, None, None, :]
    return torch.zeros(extended.shape, dtype=dtype).masked_fill(~extended, torch.finfo(dtype).min)


class Model(nn.Module):
    def forward(self, input_ids, attention_mask, labels=None):
        return invert_attention_mask(attention_mask, torch.float32)

    def generate(self, input_ids, attention_mask):
        return self(input_ids, attention_mask)


tokenizer, model = Tokenizer(), Model()
batch = tokenizer(["a b", "c"])
batch["labels"] = batch["input_ids"]
model(**batch)
model.generate(batch["input_ids"], batch["attention_mask"])
"""


def test_bitwise_not_of_an_int_mask_is_true_everywhere() -> None:
    mask = torch.tensor([1, 0])
    assert (~mask).tolist() == [-2, -1]
    try:
        torch.zeros(2).masked_fill(~mask, -1.0)
    except RuntimeError as error:
        assert "bool" in str(error).lower()
    else:
        raise AssertionError("masked_fill took an int64 condition")


def test_an_int_mask_reaches_a_helper_through_a_batch_and_a_method(found: Found) -> None:
    assert found(INT_MASK_BATCH) == [(17, "MC518")]
    assert found(INT_MASK_BATCH.replace("~extended", "extended == 0")) == []
    # the dict written otherwise (a field replaced by an update): its fields are not read
    spread_only = INT_MASK_BATCH.replace(
        'model.generate(batch["input_ids"], batch["attention_mask"])\n', "").replace(
        "    def generate(self, input_ids, attention_mask):\n"
        "        return self(input_ids, attention_mask)\n", "")
    assert found(spread_only) == [(17, "MC518")]
    assert found(spread_only.replace('batch["labels"] = batch["input_ids"]',
                                     'batch.update(attention_mask=batch["input_ids"] > 0)')
                 ) == []


# BERT-NER-Pytorch's collate returns a bool mask, spread straight into the model.
BOOL_MASK_SPREAD = """\
import torch
from torch import nn


def collate_fn(rows):
    return {
        "input_ids": torch.tensor(rows),
        "attention_mask": torch.tensor(rows).ne(0).bool(),
    }


class Model(nn.Module):
    def extended(self, attention_mask, dtype):
        extended = attention_mask[:, None, None, :]
        return (1.0 - extended) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask):
        return self.extended(attention_mask, torch.float32)


model = Model()
model(**collate_fn([[1, 2, 0]]))
"""


def test_a_collated_bool_mask_spread_into_the_model_is_read(found: Found) -> None:
    assert found(BOOL_MASK_SPREAD) == [(15, "MC512")]
    assert found(BOOL_MASK_SPREAD.replace(".ne(0).bool()", ".ne(0).long()")) == []
