"""Shapes of session 35's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 64's decoder: an upper triangle bound to a name, then AND-ed with the keep-mask for
# SDPA on the next line. The triangle is what points the wrong way (the fix is tril there).
ANDED_TRIANGLE = """\
import torch
import torch.nn.functional as F


def decode(q, k, v, tgt_in, pad_id):
    t = tgt_in.size(1)
    tgt_keep = tgt_in != pad_id
    causal = torch.ones(t, t, dtype=torch.bool).triu(1)
    self_mask = causal & tgt_keep[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=self_mask)
"""


def test_an_upper_triangle_anded_with_a_keep_mask_is_reported_where_it_is_built(
        found: Found) -> None:
    assert found(ANDED_TRIANGLE) == [(line_of(ANDED_TRIANGLE, ".triu(1)"), "MC521")]
    fixed = ANDED_TRIANGLE.replace(".triu(1)", ".tril()")
    assert fixed != ANDED_TRIANGLE and found(fixed) == []


def test_an_upper_triangle_built_inside_the_and_is_reported_at_the_and(found: Found) -> None:
    source = ANDED_TRIANGLE.replace(
        "    causal = torch.ones(t, t, dtype=torch.bool).triu(1)\n", "").replace(
        "self_mask = causal &", "self_mask = torch.ones(t, t, dtype=torch.bool).triu(1) &")
    assert found(source) == [(line_of(source, "self_mask ="), "MC521")]


def test_an_upper_triangle_anded_with_a_keep_mask_keeps_the_future() -> None:
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 3, 4)
    keep = torch.ones(1, 1, 1, 3, dtype=torch.bool)
    wrong = torch.ones(3, 3, dtype=torch.bool).triu(1) & keep
    # query 0 attends to keys 1 and 2 only (the future), never to itself
    assert wrong[0, 0, 0].tolist() == [False, True, True]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=wrong)
    right = torch.ones(3, 3, dtype=torch.bool).tril() & keep
    assert not torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=right))


def test_an_upper_triangle_also_read_as_a_fill_condition_is_reported_at_the_and(
        found: Found) -> None:
    source = ANDED_TRIANGLE.replace(
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=self_mask)\n",
        "    scores = (q @ k.transpose(-2, -1)).masked_fill(causal, float('-inf'))\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=self_mask), scores\n")
    assert found(source) == [(line_of(source, "self_mask ="), "MC521")]


# Held-out 65's MEGABYTE: lucidrains' layout, a ModuleList of [attention, feed-forward] pairs
# unpacked in the loop; the attention fills where its causal_mask is True, and the model's
# triangle keeps the diagonal in it (every token loses itself, the first row is empty).
NESTED_LAYERS = """\
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, causal_mask=None):
        q, k, v = self.qkv(x).chunk(3, -1)
        sim = q @ k.transpose(-2, -1)
        if causal_mask is not None:
            sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)
        return sim.softmax(-1) @ v


def FeedForward(dim):
    return nn.Sequential(nn.Linear(dim, dim), nn.GELU())


class Transformer(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.ModuleList([Attention(dim), FeedForward(dim)]) for _ in range(depth)
        ])

    def forward(self, x):
        n = x.shape[-2]
        causal_mask = torch.ones((n, n), dtype=torch.bool).triu()
        for attn, ff in self.layers:
            x = attn(x, causal_mask=causal_mask) + x
            x = ff(x) + x
        return x
"""

APPENDED_LAYERS = NESTED_LAYERS.replace("""\
        self.layers = nn.ModuleList([
            nn.ModuleList([Attention(dim), FeedForward(dim)]) for _ in range(depth)
        ])
""", """\
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([Attention(dim), FeedForward(dim)]))
""")


def test_a_layer_unpacked_from_a_modulelist_of_pairs_is_followed(found: Found) -> None:
    assert found(NESTED_LAYERS) == [(line_of(NESTED_LAYERS, ".triu()"), "MC503")]
    fixed = NESTED_LAYERS.replace(".triu()", ".triu(1)")
    assert found(fixed) == []


def test_a_layer_unpacked_from_appended_pairs_is_followed(found: Found) -> None:
    assert APPENDED_LAYERS != NESTED_LAYERS
    assert found(APPENDED_LAYERS) == [(line_of(APPENDED_LAYERS, ".triu()"), "MC503")]
    assert found(APPENDED_LAYERS.replace(".triu()", ".triu(1)")) == []


def test_pairs_of_different_classes_appended_are_not_guessed(found: Found) -> None:
    source = APPENDED_LAYERS.replace(
        "            self.layers.append(nn.ModuleList([Attention(dim), FeedForward(dim)]))\n",
        "            self.layers.append(nn.ModuleList([Attention(dim), FeedForward(dim)]))\n"
        "            self.layers.append(nn.ModuleList([FeedForward(dim), Attention(dim)]))\n")
    assert found(source) == []


def test_a_bool_triangle_that_keeps_the_diagonal_empties_the_first_row() -> None:
    sim = torch.zeros(3, 3).masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(),
                                        -torch.finfo(torch.float32).max)
    # row 0 has every key masked: softmax spreads it evenly over all of them, the future too
    assert torch.allclose(sim.softmax(-1)[0], torch.full((3,), 1 / 3))


# Held-out 65's Flamingo resampler: the key padding mask (True = padding) padded with False
# for the latents and rearranged to (b, 1, 1, j), then handed to SDPA (True = may attend).
PADDED_KEY_PADDING = """\
import torch.nn.functional as F
from einops import rearrange


def resample(q, k, v, latents, key_padding_mask):
    key_padding_mask = F.pad(key_padding_mask, (0, latents.shape[-2]), value=False)
    key_padding_mask = rearrange(key_padding_mask, "b j -> b 1 1 j")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding_mask)
"""


def test_a_key_padding_mask_padded_and_rearranged_into_sdpa_is_reported(found: Found) -> None:
    sdpa = line_of(PADDED_KEY_PADDING, "attn_mask=key_padding_mask")
    assert found(PADDED_KEY_PADDING) == [(sdpa, "MC502")]
    fixed = PADDED_KEY_PADDING.replace("attn_mask=key_padding_mask", "attn_mask=~key_padding_mask")
    assert found(fixed) == []


def test_a_key_padding_mask_padded_with_true_is_not_read(found: Found) -> None:
    # (padded with True, the new keys are padding: still the same convention, but the pad
    # is no reshape the rule follows, so nothing is claimed)
    source = PADDED_KEY_PADDING.replace("value=False", "value=True")
    assert found(source) == []


def test_sdpa_reads_a_padded_key_padding_mask_as_the_keys_to_attend() -> None:
    q = k = v = torch.randn(1, 1, 2, 4)
    padding = torch.tensor([[False, True]])  # key 1 is padding
    wrong = F.pad(padding, (0, 0), value=False)[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=wrong)
    # every query attends only to key 1, the padding
    assert torch.allclose(out, v[:, :, 1:2].expand_as(out))


# fresh48's moe-peft: an executor object's index_fill(input, dim, index, value) fills its first
# argument in place; a tensor's index_fill takes three arguments and returns a copy.
def test_another_objects_method_of_a_fill_name_is_not_a_discarded_fill(found: Found) -> None:
    source = """\
import torch
from moe_peft.executors import executor


def backward(grad_data, lora_range, scores, pad):
    executor.index_fill(grad_data, 0, lora_range, 0)
    scores.index_fill(0, lora_range, 0)
    return grad_data, scores
"""
    assert found(source) == [(line_of(source, "scores.index_fill("), "MC525")]


def test_a_tensors_index_fill_returns_a_copy() -> None:
    scores = torch.ones(2, 3)
    filled = scores.index_fill(0, torch.tensor([1]), 0)
    assert scores.sum().item() == 6 and filled.sum().item() == 3


# Held-out 64's grammar corrector: the model calls its decoder through an attribute bound in
# __init__ to the method or to its compiled version; the decoder layer hands its own padding
# mask (named so) to SDPA, which reads True as may attend.
DECODE_FN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class DecoderLayer(nn.Module):
    def forward(self, q, k, v, src_pad):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=src_pad[:, None, None, :])


class Model(nn.Module):
    def __init__(self, compile_decoder):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(2))
        self.decode_fn = torch.compile(self._decode) if compile_decoder else self._decode

    def _decode(self, q, k, v, src_pad):
        for layer in self.layers:
            q = layer(q, k, v, src_pad)
        return q

    def forward(self, q, k, v, src_ids):
        src_pad = src_ids == 0
        return self.decode_fn(q, k, v, src_pad)
"""


def test_a_method_called_through_a_compiled_alias_is_followed(found: Found) -> None:
    assert found(DECODE_FN) == [(line_of(DECODE_FN, "attn_mask=src_pad"), "MC511")]
    fixed = DECODE_FN.replace("attn_mask=src_pad[", "attn_mask=~src_pad[")
    assert found(fixed) == []


def test_an_attribute_bound_to_two_methods_is_not_followed(found: Found) -> None:
    source = DECODE_FN.replace("if compile_decoder else self._decode",
                               "if compile_decoder else self._other").replace(
        "    def forward(self, q, k, v, src_ids):",
        "    def _other(self, q, k, v, src_pad):\n        return q\n\n"
        "    def forward(self, q, k, v, src_ids):")
    assert found(source) == []


# fresh48's qorva: top-p sampling writes `remove * float("-inf")`, a comparison times -inf,
# into the logits: 0 * -inf is NaN at every kept token.
def test_a_comparison_times_minus_infinity_is_reported(found: Found) -> None:
    source = """\
import torch


def top_p(logits, p):
    sorted_logits, sorted_idx = logits.sort(descending=True)
    remove = sorted_logits.softmax(-1).cumsum(-1) > p
    return logits.scatter(1, sorted_idx, remove * float("-inf"))
"""
    assert found(source) == [(line_of(source, "remove * float"), "MC522")]
    fixed = source.replace('remove * float("-inf")',
                           'torch.zeros_like(logits).masked_fill(remove, float("-inf"))')
    assert found(fixed) == []
    remove = torch.tensor([False, True])
    assert torch.isnan(remove * float("-inf"))[0] and math.isnan(False * float("-inf"))
