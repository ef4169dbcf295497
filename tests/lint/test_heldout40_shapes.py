"""The shapes of held-out 40 (trajectory prediction, weather, genomics) that its first reading
missed or named with another code, each bad source next to the findings it must give, its
correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# MTR's encoder: a mask named for what it keeps, handed to a layer that gives it to
# nn.MultiheadAttention as key_padding_mask.
VALID_MASK_THROUGH_A_LAYER = """\
import torch
from torch import nn


class EncoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads)

    def forward(self, src, src_key_padding_mask=None):
        return self.self_attn(src, src, src, key_padding_mask=src_key_padding_mask)[0]


class Encoder(nn.Module):
    def __init__(self, d, heads, n):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d, heads) for _ in range(n)])

    def forward(self, x, polylines_mask):
        valid_mask = polylines_mask.sum(dim=-1) > 0
        x = x.permute(1, 0, 2)
        for layer in self.layers:
            x = layer(src=x, src_key_padding_mask=valid_mask)
        return x.permute(1, 0, 2)
"""


def test_a_keep_mask_as_key_padding_mask_attends_to_the_padding_only() -> None:
    mha = nn.MultiheadAttention(4, 1)
    x = torch.randn(3, 1, 4)  # (seq, batch, dim)
    valid = torch.tensor([[True, True, False]])
    _, weights = mha(x, x, x, key_padding_mask=valid)
    assert weights[0, :, :2].abs().max() == 0  # the two real tokens get no weight
    assert torch.allclose(weights[0, :, 2], torch.ones(3))  # all of it goes to the padding


def test_a_keep_mask_named_so_passed_to_a_layer_as_its_padding_mask(found: Found) -> None:
    assert found(VALID_MASK_THROUGH_A_LAYER) == [(23, "MC502")]
    fixed = VALID_MASK_THROUGH_A_LAYER.replace("src_key_padding_mask=valid_mask)",
                                               "src_key_padding_mask=~valid_mask)")
    assert found(fixed) == []


# ClimaX's variable aggregation: a registered bias rewritten in place by a helper that forward
# calls (through another helper) on every batch.
BUFFER_FILLED_BY_A_HELPER = """\
import torch
from torch import nn


class Aggregator(nn.Module):
    def __init__(self, n_vars, d):
        super().__init__()
        self.register_buffer("var_bias", torch.zeros(n_vars))
        self.attn = nn.MultiheadAttention(d, 1, batch_first=True)

    def aggregate(self, x, present):
        bias = self.var_bias.masked_fill_(~present, float("-inf"))
        return self.attn(x[:, :1], x, x, attn_mask=bias[None, :])[0]

    def encode(self, x, present):
        return self.aggregate(x, present)

    def forward(self, x, present):
        return self.encode(x, present)

    def reset(self, present):
        self.var_bias.masked_fill_(present, 0.0)
"""


def test_a_buffer_filled_in_place_keeps_the_first_calls_fill() -> None:
    class Module(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("bias", torch.zeros(3))

        def forward(self, keep: torch.Tensor) -> torch.Tensor:
            return self.bias.masked_fill_(~keep, float("-inf"))

    module = Module()
    module(torch.tensor([True, False, True]))
    second = module(torch.tensor([True, True, True]))  # nothing to mask this time
    assert second[1] == float("-inf")  # the first call's fill is still there
    assert module.state_dict()["bias"][1] == float("-inf")


def test_a_buffer_filled_in_place_by_a_method_forward_calls(found: Found) -> None:
    # reset() is called by no forward: not every call, not reported
    assert found(BUFFER_FILLED_BY_A_HELPER) == [(12, "MC524")]
    fixed = BUFFER_FILLED_BY_A_HELPER.replace("self.var_bias.masked_fill_(~present",
                                              "self.var_bias.masked_fill(~present")
    assert found(fixed) == []
    # a helper forward no longer calls
    unused = BUFFER_FILLED_BY_A_HELPER.replace("        return self.encode(x, present)",
                                               "        return x")
    assert found(unused) == []


# DNABERT's attention: the original BERT code's `nn.Softmax(dim=-1)(scores)` after a fill with
# a value too small to mask.
WEAK_FILL_BEFORE_A_SOFTMAX_MODULE = """\
import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def forward(self, q, k, v, attention_mask):
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(attention_mask == 0, -1e-20)
        probs = nn.Softmax(dim=-1)(scores)
        return torch.matmul(probs, v)
"""


def test_a_tiny_negative_fill_leaves_the_padding_its_weight() -> None:
    scores = torch.zeros(1, 4)
    keep = torch.tensor([[1, 1, 0, 0]])
    probs = nn.Softmax(dim=-1)(scores.masked_fill(keep == 0, -1e-20))
    assert torch.allclose(probs, torch.full((1, 4), 0.25))  # the padding weighs as much


def test_a_weak_fill_before_a_softmax_module_built_in_place(found: Found) -> None:
    assert found(WEAK_FILL_BEFORE_A_SOFTMAX_MODULE) == [(10, "MC516")]
    fixed = WEAK_FILL_BEFORE_A_SOFTMAX_MODULE.replace("-1e-20", "torch.finfo(scores.dtype).min")
    assert found(fixed) == []
    nested = WEAK_FILL_BEFORE_A_SOFTMAX_MODULE.replace(
        "        probs = nn.Softmax(dim=-1)(scores)\n", "").replace(
        "        scores = scores.masked_fill(attention_mask == 0, -1e-20)\n",
        "        probs = nn.Softmax(dim=-1)(scores.masked_fill(attention_mask == 0, -1e-20))\n")
    assert found(nested) == [(10, "MC516")]
