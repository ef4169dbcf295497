"""Shapes of session 34's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Kronos' layers (fresh43's kronos-finance, sktime's copy): the layer's key_padding_mask
# (True = padding, as its callers' `padding_mask == 0` valid mask says) is reshaped into a
# name in one branch, None in the other, and that name is SDPA's attn_mask (True = attend).
KRONOS_LAYER = """\
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, key_padding_mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if key_padding_mask is not None:
            attn_mask = key_padding_mask.unsqueeze(1).unsqueeze(2)
            attn_mask = attn_mask.expand(-1, self.heads, n, -1)
        else:
            attn_mask = None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return y.transpose(1, 2).reshape(b, n, d)
"""


def test_a_key_padding_mask_reshaped_into_sdpas_attn_mask_is_reported(found: Found) -> None:
    sdpa = line_of(KRONOS_LAYER, "F.scaled_dot_product_attention(")
    assert found(KRONOS_LAYER) == [(sdpa, "MC502")]
    fixed = KRONOS_LAYER.replace("= key_padding_mask.unsqueeze", "= ~key_padding_mask.unsqueeze")
    assert fixed != KRONOS_LAYER and found(fixed) == []


def test_the_parameter_rebound_to_its_own_reshape_is_reported(found: Found) -> None:
    source = """\
import torch.nn.functional as F


def attend(q, k, v, key_padding_mask=None):
    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding_mask)
"""
    assert found(source) == [(line_of(source, "attn_mask=key_padding_mask"), "MC502")]
    inverted = source.replace("= key_padding_mask[:, None", "= ~key_padding_mask[:, None")
    assert inverted != source and found(inverted) == []


def test_a_name_bound_to_anything_else_in_another_branch_is_left_alone(found: Found) -> None:
    # `attn_mask = causal` in the other branch: the name is not the padding mask on every path
    other = KRONOS_LAYER.replace("            attn_mask = None\n",
                                 "            attn_mask = self.causal\n")
    assert other != KRONOS_LAYER and found(other) == []
    # a float cast may be the author's own additive form: not a reshape
    cast = KRONOS_LAYER.replace(".unsqueeze(1).unsqueeze(2)", ".float().unsqueeze(1)")
    assert cast != KRONOS_LAYER and found(cast) == []


def test_sdpa_reads_a_key_padding_mask_as_the_keys_to_attend() -> None:
    # The fact behind the finding: True at the padding means SDPA attends to the padding only.
    torch.manual_seed(0)
    q = torch.randn(1, 1, 3, 4)
    k = torch.randn(1, 1, 3, 4)
    v = torch.randn(1, 1, 3, 4)
    key_padding_mask = torch.tensor([[False, False, True]])  # the last key is padding
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding_mask[:, None, None, :])
    # every query then reads the padded key's value alone
    assert torch.allclose(out, v[:, :, 2:3].expand_as(out))
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=~key_padding_mask[:, None, None, :])
    assert not torch.allclose(right, out)


# Held-out 61's session recommender: a builder returns the keep triangle (tril), the layer
# adds two leading axes and ORs in its padding parameter, and fills where the result is True.
FUTURE_MASK_FILL = """\
import torch


def future_mask(n, device):
    return torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))


def attend(scores, pad):
    t = scores.shape[-1]
    blocked = future_mask(t, scores.device)[None, None] | pad[:, None, None, :]
    return scores.masked_fill(blocked, torch.finfo(scores.dtype).min).softmax(-1)
"""


def test_a_keep_triangle_with_leading_axes_ored_with_padding_is_reported(found: Found) -> None:
    builder = line_of(FUTURE_MASK_FILL, "torch.tril(")
    assert found(FUTURE_MASK_FILL) == [(builder, "MC521")]
    fixed = FUTURE_MASK_FILL.replace("torch.tril(", "torch.triu(").replace(
        "device=device))", "device=device), 1)")
    assert fixed != FUTURE_MASK_FILL and found(fixed) == []


def test_leading_axes_keep_the_triangle_and_other_indexing_does_not(found: Found) -> None:
    source = """\
import torch


def attend(scores, n):
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return scores.masked_fill(causal[None, None], float("-inf")).softmax(-1)
"""
    # (a triangle made in the same function is reported at its use)
    assert found(source) == [(line_of(source, "causal[None, None]"), "MC521")]
    # `[:, None]` moves the triangle off the last two axes: nothing is claimed about it
    moved = source.replace("causal[None, None]", "causal[:, None]")
    assert found(moved) == []


def test_a_keep_triangle_ored_with_padding_hides_the_diagonal() -> None:
    # The fact behind the finding: filling `tril | pad` hides every query's own key and the
    # past, and leaves the future visible.
    n = 4
    scores = torch.zeros(1, 1, n, n)
    pad = torch.tensor([[False, False, False, True]])
    blocked = torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None] | pad[:, None, None, :]
    weights = scores.masked_fill(blocked, torch.finfo(scores.dtype).min).softmax(-1)
    assert weights[0, 0, 0, 0] == 0 and weights[0, 0, 0, 1] > 0  # own key hidden, future seen
    right = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)[None, None] | pad[:, None, None, :]
    kept = scores.masked_fill(right, torch.finfo(scores.dtype).min).softmax(-1)
    assert kept[0, 0, 0, 0] == 1


# Held-out 61's bird-call model: its layer hands key_padding_mask to SDPA (the slip, MC502),
# and its attention-pooling head fills where the same mask is True, which is right.
SDPA_SLIP_AND_RIGHT_FILL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, key_padding_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding_mask[:, None, None, :])
        return y.transpose(1, 2).reshape(b, n, d)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Layer(32, 4)
        self.att = nn.Linear(32, 1)

    def forward(self, x, key_padding_mask):
        x = self.layer(x, key_padding_mask)
        att = self.att(x).masked_fill(key_padding_mask[..., None], float("-inf"))
        return (torch.softmax(att, dim=1) * x).sum(dim=1)
"""


def test_a_key_padding_mask_handed_to_sdpa_is_not_the_models_convention(found: Found) -> None:
    sdpa = line_of(SDPA_SLIP_AND_RIGHT_FILL, "F.scaled_dot_product_attention(")
    assert found(SDPA_SLIP_AND_RIGHT_FILL) == [(sdpa, "MC502")]
    fixed = SDPA_SLIP_AND_RIGHT_FILL.replace("attn_mask=key_padding_mask[",
                                             "attn_mask=~key_padding_mask[")
    assert fixed != SDPA_SLIP_AND_RIGHT_FILL and found(fixed) == []


# fresh45's rec4torch: DIN's attention pooling takes an optional mask, and builds the same
# (True = real behaviour) mask from the lengths when none is given; then fills where it is
# True. The default path is the one that runs when callers pass lengths only.
DIN_POOLING = """\
import torch
import torch.nn.functional as F


def pool(scores, keys, keys_length, mask=None):
    btz, seq_len, _ = keys.shape
    if mask is not None:
        keys_mask = mask.unsqueeze(1)
    else:
        keys_mask = torch.arange(seq_len, device=keys.device).repeat(btz, 1)
        keys_mask = keys_mask < keys_length
        keys_mask = keys_mask.unsqueeze(1)
    scores = torch.masked_fill(scores, keys_mask.bool(), float("-inf"))
    return F.softmax(scores, dim=-1)
"""


def test_the_default_paths_mask_sets_the_convention_after_the_if(found: Found) -> None:
    fill = line_of(DIN_POOLING, "torch.masked_fill(")
    assert found(DIN_POOLING) == [(fill, "MC519")]
    fixed = DIN_POOLING.replace("keys_mask.bool(), float", "~keys_mask.bool(), float")
    assert fixed != DIN_POOLING and found(fixed) == []
    # a branch that does more to the parameter than reshape it says nothing of the default's
    other = DIN_POOLING.replace("keys_mask = mask.unsqueeze(1)", "keys_mask = (mask == 0)")
    assert other != DIN_POOLING and found(other) == []


def test_a_weak_fill_meant_to_mask_has_its_condition_read_too(found: Found) -> None:
    # rec4torch's weight-normalised DIN pooling: "padding置为-inf" says the comment, but the
    # fill is -1e-7 (MC516) and where it fills is the keep-mask (MC519): two slips, one line
    weak = DIN_POOLING.replace('float("-inf")', "-1e-7")
    fill = line_of(weak, "torch.masked_fill(")
    assert sorted(found(weak)) == [(fill, "MC516"), (fill, "MC519")]
    right_place = weak.replace("keys_mask.bool(), -1e-7", "~keys_mask.bool(), -1e-7")
    assert right_place != weak and found(right_place) == [(fill, "MC516")]
