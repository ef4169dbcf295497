"""The causes behind the recall misses of session 5, each as the code shape it takes in real code:
a keep-mask known by its name, a token-id test against 0, a pad-index test handed to torch's
modules, a default built `like` the token ids, a score tensor known by its softmax, and the engine
gaps (a branch that returns, `:=` and `nonlocal` rebinding, a @staticmethod's callers). Each bad
source next to the findings it must give, and its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from maskcheck.conventions import declares_keep

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)



@pytest.mark.parametrize(("name", "keep"), [
    ("keep", True), ("pad_keep", True), ("src_keep", True), ("keepMask", True),
    ("valid_mask", True), ("self.visible", True),
    ("keepdim", False), ("invalid_mask", False), ("keep_idx", False), ("keep_prob", False),
    ("valid_lengths", False), ("keep_last", False), ("pad_mask", False)])
def test_a_keep_mask_by_name_is_a_whole_word_beside_no_count_or_index(name: str,
                                                                      keep: bool) -> None:
    assert declares_keep(name) is keep


# A keep-mask that arrives as a parameter, named for what it is (a closure over it, as in the
# dev corpus; pytorch/pytorch#103963 for the float 0/1 mask given to SDPA).
KEEP_TO_SDPA = '''import torch
import torch.nn.functional as F


def make_attend(padding_keep: torch.Tensor):
    bias = padding_keep.to(torch.float32)

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    return attend
'''


def test_a_keep_mask_by_name_cast_to_float_for_sdpa_is_found(found: Found) -> None:
    assert found(KEEP_TO_SDPA) == [(6, "MC508")]  # at the cast: the use takes it as it is


def test_a_keep_mask_by_name_given_as_bool_or_turned_additive_is_silent(found: Found) -> None:
    as_bool = KEEP_TO_SDPA.replace("padding_keep.to(torch.float32)", "padding_keep.bool()")
    additive = KEEP_TO_SDPA.replace(
        "padding_keep.to(torch.float32)",
        "torch.zeros(padding_keep.shape).masked_fill(~padding_keep, float('-inf'))")
    assert found(as_bool) == []
    assert found(additive) == []


# huggingface/transformers#205: the tokenizer's mask (1 = real token) bound to a name that says
# so, then used as the masked_fill condition, which masks where it is True.
KEEP_AS_FILL = '''import torch


def pointer_scores(attention_mask: torch.Tensor):
    src_keep = attention_mask.unsqueeze(1).bool()

    def score(logits: torch.Tensor) -> torch.Tensor:
        return logits.masked_fill(src_keep, float("-inf")).log_softmax(-1)

    return score
'''


def test_a_keep_mask_by_name_as_the_fill_condition_is_found(found: Found) -> None:
    assert found(KEEP_AS_FILL) == [(8, "MC519")]


@pytest.mark.parametrize("condition", ["~src_keep", "src_keep == 0", "src_keep.logical_not()"])
def test_an_inverted_keep_mask_as_the_fill_condition_is_silent(found: Found,
                                                              condition: str) -> None:
    source = KEEP_AS_FILL.replace("masked_fill(src_keep,", f"masked_fill({condition},")
    assert found(source) == []


def test_a_padding_mask_by_name_as_the_fill_condition_is_silent(found: Found) -> None:
    source = KEEP_AS_FILL.replace("src_keep", "src_pad").replace(
        "attention_mask.unsqueeze(1).bool()", "attention_mask.unsqueeze(1) == 0")
    assert found(source) == []


# georg-wolflein/good-features PR #1: a 0/1 mask multiplied into the logits before softmax.
KEEP_TIMES_LOGITS = '''import torch


def masked_attention(pad_keep: torch.Tensor):
    def attend(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-1, -2)
        s *= pad_keep[:, None, :]
        return s.softmax(-1)

    return attend
'''


def test_a_keep_mask_by_name_multiplied_into_logits_is_found(found: Found) -> None:
    assert found(KEEP_TIMES_LOGITS) == [(7, "MC520")]


def test_a_keep_mask_by_name_multiplied_after_softmax_is_silent(found: Found) -> None:
    source = KEEP_TIMES_LOGITS.replace(
        "        s *= pad_keep[:, None, :]\n        return s.softmax(-1)\n",
        "        p = s.softmax(-1) * pad_keep[:, None, :]\n"
        "        return p / p.sum(-1, keepdim=True)\n")
    assert found(source) == []


# mlwithme/TransformerTranslation#2/#6: `tokens != PAD` and `input_ids.ne(0)` are True at the
# real tokens, handed to torch's modules (True = padding) and to masked_fill.
PAD_TESTS = '''import torch
import torch.nn as nn


class TranslationModel(nn.Module):
    PAD_IDX = 1

    def __init__(self, d_model: int = 64) -> None:
        super().__init__()
        self.transformer = nn.Transformer(d_model, 4, batch_first=True)

    def forward(self, src, tgt):
        src_padding_mask = src != self.PAD_IDX
        return self.transformer(src, tgt, src_key_padding_mask=src_padding_mask)


def attention_weights(q, k, input_ids):
    key_padding_mask = input_ids.ne(0)
    w = torch.bmm(q, k.transpose(1, 2))
    return w.masked_fill(key_padding_mask.unsqueeze(1), float("-inf")).softmax(-1)
'''


def test_keep_tests_on_token_ids_where_true_must_mean_padding_are_found(found: Found) -> None:
    assert found(PAD_TESTS) == [(14, "MC511"), (20, "MC519")]


def test_padding_tests_on_token_ids_are_silent(found: Found) -> None:
    source = PAD_TESTS.replace("src != self.PAD_IDX", "src == self.PAD_IDX").replace(
        "input_ids.ne(0)", "input_ids.eq(0)")
    assert found(source) == []


def test_position_ids_compared_with_zero_are_no_padding_test(found: Found) -> None:
    source = PAD_TESTS.replace("input_ids", "position_ids")
    assert found(source) == [(14, "MC511")]


# ZikangZhou/HiVT#44 / hustvl/EVF-SAM#37: the default built like the token ids is an int64 mask,
# so what callers pass is one too, and `~` on it gives -1 / -2.
LIKE_IDS = '''import torch
from torch import nn


class TextEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)

    def forward(self, hidden, input_ids, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        padding = ~attention_mask
        return self.encoder(hidden, src_key_padding_mask=padding)
'''


def test_bitwise_not_on_a_mask_made_like_the_token_ids_is_found(found: Found) -> None:
    assert found(LIKE_IDS) == [(14, "MC518")]


def test_a_mask_made_like_the_token_ids_compared_with_zero_is_silent(found: Found) -> None:
    fixed = LIKE_IDS.replace("~attention_mask", "attention_mask == 0")
    as_bool = LIKE_IDS.replace("torch.ones_like(input_ids)",
                               "torch.ones_like(input_ids, dtype=torch.bool)")
    assert found(fixed) == []
    assert found(as_bool) == []


# A bool mask added to a tensor that is scores by its use: the function softmaxes it.
BOOL_PLUS_SOFTMAXED = '''import torch


def window_bias(n: int, w: int):
    idx = torch.arange(n)
    inside = (idx[:, None] - idx[None, :]).abs() <= w

    def apply(s: torch.Tensor) -> torch.Tensor:
        s += inside
        return s.softmax(-1)

    return apply
'''


def test_a_bool_added_to_a_tensor_that_goes_into_softmax_is_found(found: Found) -> None:
    assert found(BOOL_PLUS_SOFTMAXED) == [(9, "MC509")]


def test_a_bool_added_to_a_tensor_that_is_never_softmaxed_is_silent(found: Found) -> None:
    counted = BOOL_PLUS_SOFTMAXED.replace("return s.softmax(-1)", "return s.sum(-1)")
    filled = BOOL_PLUS_SOFTMAXED.replace("s += inside",
                                         "s = s.masked_fill(~inside, float('-inf'))")
    assert found(counted) == []
    assert found(filled) == []


# A branch that returns leaves its bindings behind: the causal call after it runs only
# without the cache (the split lag-llama PR #84 made).
EARLY_RETURN = '''import torch
import torch.nn.functional as F


def attend(q, k, v, cache=None, mask=None):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=-2)
        v = torch.cat([cache[1], v], dim=-2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''


def test_is_causal_after_a_branch_that_returned_with_the_cache_is_silent(
        found: Found) -> None:
    assert found(EARLY_RETURN) == []


def test_is_causal_after_a_branch_that_falls_through_with_the_cache_is_found(
        found: Found) -> None:
    source = EARLY_RETURN.replace(
        "        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n", "")
    assert found(source) == [(9, "MC510")]


def test_a_cache_bound_before_an_else_that_raises_is_still_seen(found: Found) -> None:
    source = '''import torch
import torch.nn.functional as F


def attend(q, k, v, cache):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=-2)
    else:
        k = k.flip(0)
        raise ValueError("a cache is required")
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''
    assert found(source) == [(11, "MC510")]


# MC520 follows a name rebound by `:=` or by a closure's `nonlocal`.
REBOUND = '''import torch


def pool(a, lengths):
    keep = torch.arange(a.size(-1))[None, :] < lengths[:, None]
    a = a * keep.float()
    REBIND
    return torch.softmax(a, dim=-1)
'''


@pytest.mark.parametrize("rebind", [
    "if (a := a.masked_fill(~keep, float('-inf'))) is None:\n        return a",
    "def fix():\n        nonlocal a\n        a = a.masked_fill(~keep, float('-inf'))\n    fix()",
])
def test_a_product_rebound_by_walrus_or_nonlocal_before_softmax_is_silent(
        found: Found, rebind: str) -> None:
    assert found(REBOUND.replace("REBIND", rebind)) == []


def test_a_product_bound_by_walrus_is_found(found: Found) -> None:
    source = REBOUND.replace("    a = a * keep.float()\n    REBIND\n",
                             "    if (a := a * keep.float()) is None:\n        pass\n")
    assert found(source) == [(6, "MC520")]


def test_without_the_rebinding_the_product_is_found(found: Found) -> None:
    assert found(REBOUND.replace("    REBIND\n", "")) == [(6, "MC520")]


# A @staticmethod helper called as self._fill(...): its callers are read against it, not
# against a method or function of the same name elsewhere in the file.
STATIC = '''import torch


class Head(torch.nn.Module):
    @staticmethod
    def _fill(scores, pad):
        return scores.masked_fill(pad, -1e9)

    def forward(self, x, pad):
        return self._fill((x @ x.transpose(-1, -2)).float(), pad).softmax(-1)


class HalfHead(torch.nn.Module):
    @staticmethod
    def _fill(scores, pad):
        return scores.masked_fill(pad, -1e9)

    def forward(self, x, pad):
        return self._fill(x.half(), pad).softmax(-1)
'''


def test_a_staticmethod_called_only_with_float32_by_its_class_is_silent(found: Found) -> None:
    # Head's helper only ever gets float32 scores; HalfHead's gets half ones.
    assert found(STATIC) == [(16, "MC501")]


# A helper of the file checked at its calls: lag-llama#81 (keys concatenated with the cache by
# the caller, is_causal=True inside the helper) and hkproj/pytorch-transformer#19 (a decode loop
# builds `triu(..., 1)` for an attention function that keeps where the mask is non-zero).
HELPERS = '''import torch
import torch.nn.functional as F


def attend(q, k, v, causal: bool):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def attention(query, key, value, mask):
    scores = query @ key.transpose(-2, -1)
    scores = scores.masked_fill(mask == 0, float("-inf"))
    return scores.softmax(dim=-1) @ value


def decode_step(q, k, v, cache):
    if cache is not None:
        ck, cv = cache
        k = torch.cat((ck, k), dim=-2)
        v = torch.cat((cv, v), dim=-2)
    return attend(q, k, v, True)


def greedy(x, n):
    look_ahead = torch.triu(torch.ones((1, n, n)), diagonal=1).type(torch.int)
    return attention(x, x, x, look_ahead)
'''


def test_helper_calls_that_break_what_the_helper_does_are_found(found: Found) -> None:
    assert found(HELPERS) == [(20, "MC510"), (25, "MC521")]


def test_helper_calls_that_fit_what_the_helper_does_are_silent(found: Found) -> None:
    source = HELPERS.replace("attend(q, k, v, True)", "attend(q, k, v, cache is None)").replace(
        "torch.triu(torch.ones((1, n, n)), diagonal=1).type(torch.int)",
        "(torch.triu(torch.ones((1, n, n)), diagonal=1) == 0).type(torch.int)")
    assert found(source) == []


def test_a_helper_that_fills_where_its_mask_is_true_wants_the_upper_triangle(
        found: Found) -> None:
    source = HELPERS.replace("masked_fill(mask == 0,", "masked_fill(mask.bool(),")
    assert found(source) == [(20, "MC510")]
    lower = source.replace("torch.triu(torch.ones((1, n, n)), diagonal=1).type(torch.int)",
                           "torch.ones(n, n, dtype=torch.bool).tril()")
    assert found(lower) == [(20, "MC510"), (25, "MC521")]


# huggingface/transformers#32195: the 2-D attention_mask expanded the way BERT's
# get_extended_attention_mask does, cast to the scores' dtype and added without `(1 - m) * min`.
EXTENDED = '''import torch
import torch.nn as nn


class EagerAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, attention_mask: torch.Tensor):
        scores = q @ k.transpose(-1, -2)
        ext = attention_mask[:, None, None, :].to(scores.dtype)
        scores = scores + ext
        return scores.softmax(-1)
'''


def test_the_extended_hf_mask_added_without_inversion_is_found(found: Found) -> None:
    assert found(EXTENDED) == [(8, "MC508")]


def test_the_extended_hf_mask_turned_additive_first_is_silent(found: Found) -> None:
    source = EXTENDED.replace(
        "        scores = scores + ext\n",
        "        ext = (1.0 - ext) * torch.finfo(scores.dtype).min\n"
        "        scores = scores + ext\n")
    assert found(source) == []


def test_another_expansion_of_an_unknown_mask_is_not_read_as_hf(found: Found) -> None:
    # (N, 1, S, 1) or a mask of another name says nothing about HF's convention
    other_axes = EXTENDED.replace("[:, None, None, :]", "[:, None, :, None]")
    other_name = EXTENDED.replace("attention_mask", "attn_bias")
    assert found(other_axes) == []
    assert found(other_name) == []


# lucidrains/halonet-pytorch#4: the unfolded ones-mask is 1 at real pixels (a keep-mask), and
# filling where it is True masks the image instead of the padding.
UNFOLDED = '''import torch
import torch.nn.functional as F


def halo_scores(sim: torch.Tensor, h: int, w: int, block: int, halo: int, heads: int):
    mask = torch.ones(1, 1, h, w, device=sim.device)
    mask = F.unfold(mask, kernel_size=block + (halo * 2), stride=block, padding=halo)
    mask = mask.transpose(1, 2).repeat_interleave(heads, dim=0)
    mask = mask.bool()
    max_neg_value = -torch.finfo(sim.dtype).max
    sim.masked_fill_(mask, max_neg_value)
    return sim.softmax(dim=-1)
'''


def test_an_unfolded_ones_mask_as_the_fill_condition_is_found(found: Found) -> None:
    assert found(UNFOLDED) == [(11, "MC519")]


def test_an_unfolded_ones_mask_inverted_before_the_fill_is_silent(found: Found) -> None:
    source = UNFOLDED.replace("mask = mask.bool()", "mask = ~mask.bool()")
    assert found(source) == []


# InseeFrLab/torchTextClassifiers PR #92: forward inverts its `attention_mask` before SDPA,
# and the file's own caller hands it the tokenizer's mask (1 = real token).
LABEL_ATTENTION = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class LabelAttention(nn.Module):
    def forward(self, q, k, v, attention_mask):
        pad = attention_mask == 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])


def classify(model: LabelAttention, tokenizer, texts, q, k, v):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return model(q, k, v, batch["attention_mask"])
'''


def test_forward_reading_its_attention_mask_inverted_is_found_where_it_does(
        found: Found) -> None:
    assert found(LABEL_ATTENTION) == [(9, "MC511")]


def test_an_instance_made_in_the_file_is_read_the_same_way(found: Found) -> None:
    source = LABEL_ATTENTION.replace("def classify(model: LabelAttention, ",
                                     "def classify(").replace(
        "    batch = tokenizer", "    model = LabelAttention()\n    batch = tokenizer")
    assert found(source) == [(9, "MC511")]


def test_forward_given_the_padding_mask_it_expects_is_silent(found: Found) -> None:
    fixed = LABEL_ATTENTION.replace("pad = attention_mask == 0", "pad = attention_mask.bool()")
    padding = LABEL_ATTENTION.replace('batch["attention_mask"])', 'batch["attention_mask"] == 0)')
    no_caller = LABEL_ATTENTION.split("\n\ndef classify")[0] + "\n"
    assert found(fixed) == []
    assert found(padding) == []
    assert found(no_caller) == []


def test_a_keep_mask_passed_as_a_helpers_fill_condition_is_found_at_the_call(
        found: Found) -> None:
    source = '''import torch


def fill(scores, pad):
    return scores.masked_fill(pad, float("-inf")).softmax(-1)


def run(scores, input_ids):
    return fill(scores, input_ids != 0)
'''
    assert found(source) == [(9, "MC519")]
    assert found(source.replace("input_ids != 0", "input_ids == 0")) == []


def test_an_instance_declared_by_annotation_at_module_level_is_read_the_same_way(
        found: Found) -> None:
    head = LABEL_ATTENTION.split("\n\ndef classify")[0]
    source = head + ('\n\nmodel: LabelAttention\nq = k = v = torch.randn(1, 1, 2, 4)\n'
                     'batch = tokenizer(["a"], return_tensors="pt")\n'
                     'out = model(q, k, v, batch["attention_mask"])\n')
    assert found(source) == [(9, "MC511")]


# sglang 0.5.23's LTX-2 connector: a rank switch that rebinds the mask to a 4-D layout keeps
# whatever the caller passed (there an additive mask), so it is not BERT's keep-mask idiom.
RANK_SWITCH = '''import torch
import torch.nn.functional as F


def attend(query, key, value, attention_mask=None):
    if attention_mask is not None:
        if attention_mask.ndim == 2:
            attention_mask = attention_mask[:, None, None, :]
        elif attention_mask.ndim == 3:
            attention_mask = attention_mask[:, None, :, :]
        attention_mask = attention_mask.to(dtype=query.dtype)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
'''


def test_a_rank_switch_of_the_mask_in_place_is_silent(found: Found) -> None:
    assert found(RANK_SWITCH) == []
    renamed = RANK_SWITCH.replace("attention_mask = attention_mask[:, None, None, :]",
                                  "ext = attention_mask[:, None, None, :]").replace(
        "attention_mask = attention_mask.to(dtype=query.dtype)",
        "attention_mask = ext.to(dtype=query.dtype)")
    assert found(renamed) == [(11, "MC508")]
