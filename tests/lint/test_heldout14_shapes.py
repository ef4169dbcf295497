"""Real code shapes behind the misses of the fourteenth held-out recall set (known bugs
re-spelled in surroundings no other set uses, written apart from the engine): each bad source
next to the findings it must give, its correct form next to none (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# A learned bias per layer in an nn.ParameterList, walked with zip next to the blocks and
# masked in place (the drum-pattern generator).
PARAMETER_LIST = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, layers=2, heads=2, steps=16):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(layers))
        self.step_bias = nn.ParameterList(
            nn.Parameter(torch.zeros(heads, steps, steps)) for _ in range(layers))

    def forward(self, x, n):
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        for block, bias in zip(self.blocks, self.step_bias):
            bias = bias[:, :n, :n]
            bias.masked_fill_(future, float("-inf"))
            x = block(x) + bias.sum()
        return x
'''


def test_an_in_place_fill_of_a_parameter_list_element_is_found(found: Found) -> None:
    assert found(PARAMETER_LIST) == [(16, "MC505")]


@pytest.mark.parametrize("loop", [
    "for bias in self.step_bias:",
    "for i, bias in enumerate(self.step_bias):",
])
def test_every_way_of_walking_the_parameter_list_is_read(found: Found, loop: str) -> None:
    source = PARAMETER_LIST.replace("for block, bias in zip(self.blocks, self.step_bias):", loop)
    source = source.replace("x = block(x) + bias.sum()", "x = x + bias.sum()")
    assert found(source) == [(16, "MC505")]


def test_the_out_of_place_fill_is_silent(found: Found) -> None:
    source = PARAMETER_LIST.replace('            bias.masked_fill_(future, float("-inf"))\n',
                                    "").replace(
        "bias = bias[:, :n, :n]", 'bias = bias[:, :n, :n].masked_fill(future, float("-inf"))')
    assert found(source) == []


def test_a_plain_module_list_of_tensors_is_not_a_parameter(found: Found) -> None:
    source = PARAMETER_LIST.replace("nn.ParameterList(", "list(")
    assert found(source) == []


def test_a_parameter_list_element_refuses_an_in_place_fill() -> None:
    biases = nn.ParameterList(torch.zeros(2, 4, 4) for _ in range(2))
    assert all(isinstance(b, nn.Parameter) and b.requires_grad for b in biases)
    future = torch.ones(3, 3, dtype=torch.bool).triu(1)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        biases[0][:, :3, :3].masked_fill_(future, float("-inf"))


# The fill value held by a config dict literal (annotated with a TypedDict), read by key.
CONFIG_FILL = '''from typing import TypedDict

import torch


class Config(TypedDict):
    hidden: int
    mask_value: float


DEFAULT: Config = {"hidden": 64, "mask_value": -1e9}


class Layer(torch.nn.Module):
    def __init__(self, cfg: Config = DEFAULT):
        super().__init__()
        self.cfg = cfg

    def forward(self, e, adj):
        e = e.masked_fill(~adj, self.cfg["mask_value"])
        return e.softmax(dim=-1).half()
'''


def test_a_fill_value_read_from_a_config_dict_is_found(found: Found) -> None:
    assert found(CONFIG_FILL) == [(20, "MC501")]
    plain = CONFIG_FILL.replace("DEFAULT: Config = ", "DEFAULT = ")
    assert found(plain) == [(20, "MC501")]


def test_a_finite_config_fill_is_silent(found: Found) -> None:
    assert found(CONFIG_FILL.replace("-1e9", "-1e4")) == []


def test_a_key_that_no_dict_of_the_file_holds_is_silent(found: Found) -> None:
    assert found(CONFIG_FILL.replace('self.cfg["mask_value"]', 'self.cfg["neg_value"]')) == []


# A project's own context manager that enters autocast, around a float32-minimum fill.
MANAGED_AUTOCAST = '''import contextlib

import torch


@contextlib.contextmanager
def inference_precision(device_type):
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
        yield


def score(h, query, pad):
    with inference_precision(h.device.type):
        logits = h @ query
        logits = logits.masked_fill(pad, torch.finfo(torch.float32).min)
        return logits.softmax(dim=-1)
'''


def test_a_fill_under_a_context_manager_that_enters_autocast_is_found(found: Found) -> None:
    assert found(MANAGED_AUTOCAST) == [(16, "MC517")]


def test_the_fill_with_the_tensors_own_minimum_is_silent(found: Found) -> None:
    source = MANAGED_AUTOCAST.replace("torch.finfo(torch.float32).min",
                                      "torch.finfo(logits.dtype).min")
    assert found(source) == []


def test_a_context_manager_without_autocast_is_silent(found: Found) -> None:
    source = MANAGED_AUTOCAST.replace(
        "with torch.no_grad(), torch.autocast(device_type, dtype=dtype):", "with torch.no_grad():")
    assert found(source) == []


# Optional additive masks summed with Python's sum (a left-padded text-to-SQL decoder).
SUMMED_BIASES = '''import torch


def padding_bias(attention_mask, dtype):
    pad = attention_mask[:, None, None, :] == 0
    return torch.zeros(pad.shape, dtype=dtype).masked_fill(pad, torch.finfo(dtype).min)


def causal_bias(n, dtype):
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return torch.zeros(n, n, dtype=dtype).masked_fill(future, torch.finfo(dtype).min)


def forward(scores, attention_mask, segment_bias=None):
    n = scores.shape[-1]
    biases = (
        causal_bias(n, scores.dtype),
        padding_bias(attention_mask, scores.dtype),
        segment_bias if segment_bias is not None else None,
    )
    bias = sum(b for b in biases if b is not None)
    return (scores + bias).softmax(dim=-1)
'''


def test_finfo_min_masks_summed_by_sum_are_found(found: Found) -> None:
    assert found(SUMMED_BIASES) == [(21, "MC513")]
    listed = SUMMED_BIASES.replace("sum(b for b in biases if b is not None)", "sum(biases)")
    assert found(listed) == [(21, "MC513")]


def test_a_clamped_sum_is_silent(found: Found) -> None:
    source = SUMMED_BIASES.replace(
        "sum(b for b in biases if b is not None)",
        "sum(b for b in biases if b is not None).clamp(min=torch.finfo(scores.dtype).min)")
    assert found(source) == []


def test_one_finfo_min_mask_in_the_sum_is_silent(found: Found) -> None:
    source = SUMMED_BIASES.replace("        causal_bias(n, scores.dtype),\n", "")
    assert found(source) == []


def test_summing_two_finfo_min_masks_overflows_to_minus_infinity() -> None:
    low = torch.finfo(torch.float16).min
    a = torch.tensor([low, 0.0], dtype=torch.float16)
    assert sum((a, a)).tolist() == [float("-inf"), 0.0]


# `batch["attention_mask"]` of a batch the file does not build: the tokenizer's key, 1 = real
# token, used as the fill condition of a pooling head (reached through a `match` on the config).
MATCH_POOLING = '''import torch


class Head(torch.nn.Module):
    def pool(self, hidden, attention_mask, kind):
        match kind:
            case "attention":
                scores = hidden.sum(-1)
                scores = scores.masked_fill(attention_mask.bool(), float("-inf"))
                return scores.softmax(dim=-1)
            case _:
                return hidden[:, 0]

    def forward(self, hidden, batch):
        return self.pool(hidden, batch["attention_mask"], "attention")
'''


def test_a_batch_attention_mask_used_as_fill_condition_is_found(found: Found) -> None:
    assert found(MATCH_POOLING) == [(9, "MC519")]


def test_the_padding_positions_as_fill_condition_are_silent(found: Found) -> None:
    assert found(MATCH_POOLING.replace("attention_mask.bool()", "attention_mask == 0")) == []


def test_another_key_of_the_batch_says_nothing(found: Found) -> None:
    source = MATCH_POOLING.replace('batch["attention_mask"]', 'batch["pad_mask"]')
    assert found(source) == []


# A generator collator yields the batch dict; the model reads its fields by key.
YIELDED_BATCH = '''import torch
from torch import nn


def batches(lengths, width):
    for n in lengths:
        pad = torch.arange(width)[None, :] >= torch.tensor([n])[:, None]
        yield {"ids": torch.zeros(1, width, dtype=torch.long), "padding_mask": pad.float()}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, batch):
        out, _ = self.attn(x, x, x, key_padding_mask=batch["padding_mask"])
        return out
'''


def test_a_field_of_a_yielded_batch_is_read_back(found: Found) -> None:
    assert found(YIELDED_BATCH) == [(17, "MC508")]
    assert found(YIELDED_BATCH.replace("pad.float()", "pad")) == []


# Masks cached in a dict attribute under the sequence length, built on a miss.
DICT_CACHE = '''import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._mask_cache = {}

    def _look_ahead(self, n):
        if n not in self._mask_cache:
            self._mask_cache[n] = torch.ones(n, n, dtype=torch.bool).triu(1)
        return self._mask_cache[n]

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self._look_ahead(q.shape[-2]))
'''


def test_a_mask_read_back_from_a_dict_cache_is_known(found: Found) -> None:
    # reported where the builder makes the triangle (the fix goes there), not at the use
    assert found(DICT_CACHE) == [(12, "MC521")]


def test_the_keep_triangle_in_the_dict_cache_is_silent(found: Found) -> None:
    assert found(DICT_CACHE.replace(".triu(1)", ".tril()")) == []


def test_sdpa_attends_where_the_cached_triangle_is_true() -> None:
    q = torch.zeros(1, 1, 3, 4)  # equal scores: the weights are uniform over what is allowed
    future = torch.ones(3, 3, dtype=torch.bool).triu(1)
    weights = torch.nn.functional.scaled_dot_product_attention(
        q, q, torch.eye(3)[None, None], attn_mask=future)
    assert weights[0, 0, 0].tolist() == [0.0, 0.5, 0.5]  # the first query sees only the future


# A NamedTuple of bool keep-masks, built by a helper and read as a field of an annotated
# parameter (an OCR post-correction seq2seq).
NAMED_MASKS = '''from typing import NamedTuple

import torch


class Masks(NamedTuple):
    src_keep: torch.Tensor
    tgt_keep: torch.Tensor


def make_masks(src, tgt, pad_id=0):
    return Masks(src_keep=src != pad_id, tgt_keep=tgt != pad_id)


def attend(energy, masks: Masks):
    energy = energy.masked_fill(1 - masks.src_keep, float("-inf"))
    return energy.softmax(dim=-1)
'''


def test_a_bool_field_of_a_named_tuple_subtracted_from_one_is_found(found: Found) -> None:
    assert found(NAMED_MASKS) == [(16, "MC512")]
    positional = NAMED_MASKS.replace("Masks(src_keep=src != pad_id, tgt_keep=tgt != pad_id)",
                                     "Masks(src != pad_id, tgt != pad_id)")
    assert found(positional) == [(16, "MC512")]


def test_the_inverted_field_is_silent(found: Found) -> None:
    assert found(NAMED_MASKS.replace("1 - masks.src_keep", "~masks.src_keep")) == []


def test_a_float_field_subtracted_from_one_is_silent(found: Found) -> None:
    source = NAMED_MASKS.replace("src_keep=src != pad_id", "src_keep=(src != pad_id).float()")
    assert found(source) == []


def test_one_minus_a_bool_tensor_raises() -> None:
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
        _ = 1 - torch.tensor([True, False])
