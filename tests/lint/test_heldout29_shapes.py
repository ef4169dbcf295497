"""The shapes of held-out 29 (code ported to PyTorch from TensorFlow, JAX, MXNet and Paddle)
that the first reading missed, each bad source next to the findings it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# TensorFlow's tutorial: `1 - band_part(ones, -1, 0)` made the look-ahead mask; a port that
# writes `1 - triu(ones)` marks the past, and `tf.maximum` combines it with the padding mask.
TF_TUTORIAL = """\
import torch

PAD = 0

def create_padding_mask(seq):
    seq = (seq == PAD).float()
    return seq[:, None, None, :]

def create_look_ahead_mask(size):
    mask = 1 - torch.triu(torch.ones(size, size))
    return mask

def scaled_dot_product_attention(scores, mask):
    big_neg = torch.finfo(scores.dtype).min
    return scores.masked_fill(mask == 1, big_neg).softmax(-1)

def decode(scores, tar):
    look_ahead_mask = create_look_ahead_mask(tar.shape[1])
    padding_mask = create_padding_mask(tar)
    combined_mask = torch.maximum(padding_mask, look_ahead_mask)
    return scaled_dot_product_attention(scores, combined_mask)
"""


def test_one_minus_triu_marks_the_past() -> None:
    look_ahead = 1 - torch.triu(torch.ones(3, 3))
    padding = torch.tensor([0.0, 0.0, 1.0])[None, :]
    combined = torch.maximum(padding, look_ahead)
    # the strictly lower triangle is 1 (filled) in the union: each query loses its past
    assert torch.equal(combined.tril(-1) == 1, torch.ones(3, 3).tril(-1) == 1)
    assert combined[0, 1] == 0  # and sees the next position


def test_a_triangle_in_a_union_of_masks_keeps_its_direction(found: Found) -> None:
    # reported once, where the triangle is made, from the helper that fills where it is 1
    assert found(TF_TUTORIAL) == [(10, "MC521")]
    fixed = TF_TUTORIAL.replace("1 - torch.triu(torch.ones(size, size))",
                                "1 - torch.tril(torch.ones(size, size))")
    assert found(fixed) == []
    union = TF_TUTORIAL.replace("torch.maximum(padding_mask, look_ahead_mask)",
                                "look_ahead_mask.logical_or(padding_mask)")
    assert found(union) == [(10, "MC521")]
    # an additive mask is not a 0/1 mask: its maximum is a union of the kept positions
    additive = TF_TUTORIAL.replace("seq = (seq == PAD).float()",
                                   "seq = (seq == PAD).float() * -1e4")
    assert found(additive) == []


# `jax.nn.dot_product_attention(query, key, value, bias=None, mask=None)` ported with its
# keywords: the bias is added, the mask selects.
JAX_PORT = """\
import torch
import torch.nn as nn

def dot_product_attention(query, key, value, bias=None, mask=None):
    logits = torch.einsum("BTNH,BSNH->BNTS", query, key)
    if bias is not None:
        logits = logits + bias
    if mask is not None:
        logits = torch.where(mask, logits, torch.finfo(logits.dtype).min)
    return torch.einsum("BNTS,BSNH->BTNH", torch.softmax(logits, dim=-1), value)

class Block(nn.Module):
    def forward(self, q, k, v, attn_mask):
        return dot_product_attention(q, k, v, bias=attn_mask)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, q, k, v):
        n = q.shape[1]
        attn_mask = torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None]
        for block in self.blocks:
            q = block(q, k, v, attn_mask)
        return q
"""


def test_a_bool_mask_given_as_a_bias_adds_one() -> None:
    logits = torch.zeros(1, 2)
    keep = torch.tensor([[True, False]])
    assert torch.equal(logits + keep, torch.tensor([[1.0, 0.0]]))  # nothing is masked


def test_a_bool_mask_given_as_the_bias_of_a_function_that_takes_a_mask(found: Found) -> None:
    # the function adds its bias as its name says: the call that gives it a mask is the bug
    assert found(JAX_PORT) == [(14, "MC509")]
    assert found(JAX_PORT.replace("bias=attn_mask", "mask=attn_mask")) == []


def test_a_function_with_only_a_bias_is_reported_where_it_adds(found: Found) -> None:
    # without a mask parameter to pick instead, the addition is where it goes wrong (held-out
    # 17's typed encoder marks it there)
    only_bias = JAX_PORT.replace("bias=None, mask=None", "bias=None").replace(
        "    if mask is not None:\n        logits = torch.where(mask, logits, "
        "torch.finfo(logits.dtype).min)\n", "")
    assert found(only_bias) == [(7, "MC509")]
