"""Real code shapes behind the misses of the fifth held-out recall set (the seeds' bugs in project
surroundings, and five reports cited nowhere else): each bad source next to the findings it must
give, and its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# nlpyang/BertSum#73: `mask = 1 - (src == 0)` where `src = torch.tensor(...)` of a padded list.
BERTSUM = '''import torch


def build(pre_src):
    src = torch.tensor(pre_src)
    mask = 1 - (src == 0)
    return mask
'''


def test_one_minus_comparison_of_a_built_tensor_is_found(found: Found) -> None:
    assert found(BERTSUM) == [(6, "MC512")]


def test_inverted_comparison_of_a_built_tensor_is_silent(found: Found) -> None:
    assert found(BERTSUM.replace("1 - (src == 0)", "~(src == 0)")) == []


def test_comparison_of_a_python_number_stays_silent(found: Found) -> None:
    # `n == 0` on a length: a Python bool, which `1 -` turns into an int
    source = "import torch\n\n\ndef f(xs):\n    n = len(xs)\n    return 1 - (n == 0)\n"
    assert found(source) == []


# The seed guide's `generate_causal_mask` (additive 0/-inf) returned by a helper, then multiplied
# into the scores ("mask是加法而非乘法").
SEED_HELPER = '''import torch


def generate_causal_mask(sz):
    return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)


attn_mask = generate_causal_mask(5)
raw = torch.randn(5, 5)
weights = torch.softmax(raw * attn_mask, dim=-1)
'''


def test_additive_mask_from_a_helper_multiplied_is_found(found: Found) -> None:
    assert found(SEED_HELPER) == [(10, "MC523")]


def test_additive_mask_from_a_helper_added_is_silent(found: Found) -> None:
    assert found(SEED_HELPER.replace("raw * attn_mask", "raw + attn_mask")) == []


# A mask-builder class whose static methods are called through an alias (`mb = MaskBuilders`).
BUILDERS = '''import torch
import torch.nn.functional as F


class MaskBuilders:
    @staticmethod
    def keep_causal(sz):
        return torch.triu(torch.ones(sz, sz, dtype=torch.bool))

    @staticmethod
    def padding(lengths, max_len):
        return torch.arange(max_len)[None, :] >= lengths[:, None]


mb = MaskBuilders


def attend(q, k, v, lengths):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mb.keep_causal(q.size(-2)))
    scores = q @ k.transpose(-2, -1)
    pad = mb.padding(lengths, k.size(-2))[:, None, None, :]
    scores = scores + pad
    return out, scores.softmax(-1)
'''
BUILDERS_FIXED = BUILDERS.replace("torch.triu(torch.ones(sz, sz, dtype=torch.bool))",
                                  "torch.tril(torch.ones(sz, sz, dtype=torch.bool))").replace(
    "scores = scores + pad", "scores = scores.masked_fill(pad, float('-inf'))")


def test_static_helpers_through_a_class_alias_are_followed(found: Found) -> None:
    # the triangle at the builder that makes it (the fix goes there), the bool at its use
    assert found(BUILDERS) == [(8, "MC521"), (22, "MC509")]


def test_static_helpers_through_a_class_alias_fixed_are_silent(found: Found) -> None:
    assert found(BUILDERS_FIXED) == []


# NVIDIA/apex#1105: -1e10 as a helper's default argument (and a module's stored fill value).
APEX = '''import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, mask_value: float = -1e10) -> None:
        super().__init__()
        self.mask_value = mask_value

    def forward(self, scores, pad):
        return scores.masked_fill(pad, self.mask_value).softmax(-1)


def pool(scores, keep, fill=-1e10):
    return scores.masked_fill(~keep, fill).softmax(-1)


def train_step(model, x, pad):
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x, pad)
'''


def test_masking_value_as_default_is_found(found: Found) -> None:
    # the value stored on self from __init__'s default counts only on score tensors by name:
    # read like a literal everywhere it also flags speechbrain's CTC prefix scorer
    # (`self.minus_inf = -1e20` on float32 log_softmax output)
    assert found(APEX) == [(11, "MC501"), (15, "MC501")]


def test_small_default_and_attribute_are_silent(found: Found) -> None:
    assert found(APEX.replace("-1e10", "-1e4")) == []


# pytorch/pytorch#115111: is_causal=True with a query cut to the last position.
LAST_TOKEN = '''import torch.nn.functional as F


def last(query, key, value):
    return F.scaled_dot_product_attention(query[:, -1, :], key, value, is_causal=True)


def head(self, hidden, k, v):
    q = self.proj(hidden[:, -1:, :])
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''


def test_causal_flag_with_a_last_position_query_is_found(found: Found) -> None:
    assert found(LAST_TOKEN) == [(5, "MC510"), (10, "MC510")]


def test_last_position_query_without_causal_flag_is_silent(found: Found) -> None:
    assert found(LAST_TOKEN.replace(", is_causal=True", "")) == []


def test_last_position_of_both_query_and_key_is_silent(found: Found) -> None:
    source = ("import torch.nn.functional as F\n\n\ndef f(q, k, v):\n    return "
              "F.scaled_dot_product_attention(q[:, :, -1:], k[:, :, -1:], v[:, :, -1:], "
              "is_causal=True)\n")
    assert found(source) == []


# EleutherAI/gpt-neox PR #25: a causal bias and a padding bias, both at the dtype minimum, summed
# into the scores in one chain.
NEOX = '''import torch


def scores_with_bias(scores, keep, n):
    neg = torch.finfo(scores.dtype).min
    causal = torch.triu(torch.full((n, n), neg, dtype=scores.dtype), 1)
    padding = (1.0 - keep[:, None, None, :].to(scores.dtype)) * neg
    return scores + causal + padding
'''


def test_two_minimum_masks_in_one_addition_chain_are_found(found: Found) -> None:
    assert found(NEOX) == [(8, "MC513")]


def test_one_minimum_mask_in_an_addition_chain_is_silent(found: Found) -> None:
    assert found(NEOX.replace("scores + causal + padding", "scores + causal + 1.0")) == []


# cerebroai/reformers#3 in a torch port: the self-token mask as an identity times -inf.
EYE = '''import torch


def self_masked(dots, n):
    return dots + torch.eye(n) * float("-inf")
'''


def test_identity_times_inf_is_found(found: Found) -> None:
    assert found(EYE) == [(5, "MC522")]


def test_identity_as_a_fill_condition_is_silent(found: Found) -> None:
    assert found(EYE.replace("dots + torch.eye(n) * float(\"-inf\")",
                             "dots.masked_fill(torch.eye(n, dtype=torch.bool), -5e4)")) == []


# The seed article's buffer: ones, filled in place with -1e9 in forward, then multiplied in.
BUFFER = '''import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("tri", torch.ones(n, n))

    def forward(self, x):
        future = torch.triu(torch.ones(3, 3), 1).bool()
        self.tri.masked_fill_(future, -1e9)
        return x * self.tri
'''


def test_buffer_filled_in_place_then_multiplied_is_found(found: Found) -> None:
    assert (13, "MC523") in found(BUFFER)


def test_buffer_of_ones_multiplied_is_silent(found: Found) -> None:
    assert found(BUFFER.replace("        self.tri.masked_fill_(future, -1e9)\n", "")) == []
