"""Classes picked from a registry of the file (`ATTENTION_TYPES[cfg.kind]`), and masks reshaped
on the way down (`pad.repeat_interleave(n, dim=0)`): what a caller passes still reaches the
forward that reads it, and the finding is where the mask is read."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# TimeSformer's divided attention picked by name from a decorator-filled registry; the bool
# frame-padding mask goes down two forwards, repeated per patch on the way.
DECORATED = """\
import torch
from torch import nn

ATTENTION_TYPES = {}


def register(name):
    def wrap(cls):
        ATTENTION_TYPES[name] = cls
        return cls
    return wrap


class Attention(nn.Module):
    def forward(self, x, pad_mask=None):
        attn = x @ x.transpose(-2, -1)
        if pad_mask is not None:
            attn = attn + pad_mask[:, None, :]
        return attn.softmax(dim=-1) @ x


@register("divided")
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, frame_pad, hw):
        return self.attn(x, frame_pad.repeat_interleave(hw, dim=0))


class Model(nn.Module):
    def __init__(self, kind, depth):
        super().__init__()
        block = ATTENTION_TYPES[kind]
        self.blocks = nn.ModuleList(block() for _ in range(depth))

    def forward(self, x, lengths):
        frame_pad = torch.arange(x.shape[1])[None, :] >= lengths[:, None]
        for blk in self.blocks:
            x = blk(x, frame_pad, 1)
        return x
"""


def test_a_bool_mask_added_to_scores_adds_one() -> None:
    scores = torch.zeros(1, 3)
    pad = torch.tensor([[False, False, True]])
    weights = (scores + pad).softmax(-1)
    assert weights[0, 2] > weights[0, 0]  # the padded key gets more weight, not none


def test_a_registered_class_gets_its_callers_mask(found: Found) -> None:
    assert found(DECORATED) == [(18, "MC509")]
    fixed = DECORATED.replace("attn = attn + pad_mask[:, None, :]",
                              "attn = attn.masked_fill(pad_mask[:, None, :], float('-inf'))")
    assert found(fixed) == []


def test_a_dict_literal_registry_and_a_single_instance(found: Found) -> None:
    literal = DECORATED.replace("ATTENTION_TYPES = {}\n", "").replace(
        '@register("divided")\n', "").replace(
        "class Model(nn.Module):", 'ATTENTION_TYPES = {"divided": Block}\n\n\nclass Model('
        "nn.Module):").replace(
        "self.blocks = nn.ModuleList(block() for _ in range(depth))", "self.block = block()"
        ).replace("for blk in self.blocks:\n            x = blk(x, frame_pad, 1)",
                  "x = self.block(x, frame_pad, 1)")
    assert "ATTENTION_TYPES = {\"divided\": Block}" in literal and "self.block(" in literal
    assert [code for _, code in found(literal)] == ["MC509"]


def test_a_rebound_registry_name_is_not_followed(found: Found) -> None:
    # the name is a parameter here, not the module's registry: nothing is known of it
    shadowed = DECORATED.replace("def __init__(self, kind, depth):",
                                 "def __init__(self, kind, depth, ATTENTION_TYPES=None):")
    assert shadowed != DECORATED
    assert found(shadowed) == []


def test_a_reshaped_parameter_keeps_the_callers_facts(found: Found) -> None:
    # one class, no registry: the mask reaches Attention only through the reshape
    plain = DECORATED.replace("block = ATTENTION_TYPES[kind]\n        ", "").replace(
        "nn.ModuleList(block()", "nn.ModuleList(Block()")
    assert found(plain) == [(18, "MC509")]
