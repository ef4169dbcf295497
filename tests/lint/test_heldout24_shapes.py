"""The program structures of held-out 24 that hid a mask from its use: a base class's method
read through `super()`, a plain class's `__call__`, a classmethod's `cls.helper(...)`, a wrapper
that sets is_causal and forwards its callers' keywords, an `nn.ModuleDict` picked by a string,
a NamedTuple field read in an expression. Each bad source next to the findings it must give,
its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

SUPER = """\
import torch
from torch import nn

class Base(nn.Module):
    def build_bias(self, keep, n, dtype):
        bias = torch.zeros(keep.shape[0], 1, 1, n, dtype=dtype)
        return bias.masked_fill(~keep[:, None, None, :], torch.finfo(dtype).min)

class Causal(Base):
    def build_bias(self, keep, n, dtype):
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        causal = torch.zeros(n, n, dtype=dtype).masked_fill(future, torch.finfo(dtype).min)
        padding = super().build_bias(keep, n, dtype)
        return causal + padding
"""


def test_two_finfo_min_planes_sum_to_minus_inf() -> None:
    low = torch.finfo(torch.float32).min
    assert torch.isinf(torch.tensor(low) + torch.tensor(low))


def test_super_gives_the_base_class_method(found: Found) -> None:
    assert found(SUPER) == [(14, "MC513")]
    fixed = SUPER.replace("padding = super().build_bias(keep, n, dtype)\n        return causal "
                          "+ padding", "return causal.masked_fill(~keep[:, None, None, :], 0.0)")
    assert found(fixed) == []


def test_the_override_is_what_self_calls(found: Found) -> None:
    # in the subclass `self.build_bias` is the override (no finfo.min plane): nothing to add up
    src = SUPER + """
    def both(self, keep, n, dtype):
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        causal = torch.zeros(n, n, dtype=dtype).masked_fill(future, torch.finfo(dtype).min)
        return causal + self.build_bias(keep, n, dtype)
"""
    assert found(src) == [(14, "MC513")]


CALLABLE = """\
import torch
from torch import nn

class CausalMaskBuilder:
    def __call__(self, n):
        return torch.tril(torch.ones(n, n, dtype=torch.bool))

class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.builder = CausalMaskBuilder()

    def forward(self, x):
        mask = self.builder(x.shape[1])
        return self.mha(x, x, x, attn_mask=mask)[0]
"""


def test_a_plain_class_call_gives_its_dunder_call(found: Found) -> None:
    assert found(CALLABLE) == [(6, "MC521")]  # in the builder, where the fix goes
    assert found(CALLABLE.replace("torch.tril(torch.ones(n, n, dtype=torch.bool))",
                                  "torch.triu(torch.ones(n, n, dtype=torch.bool), 1)")) == []


CLASSMETHOD = """\
import torch

class MaskConverter:
    @staticmethod
    def expand(mask, dtype):
        inverted = 1.0 - mask[:, None, None, :]
        return inverted.to(dtype)

    @classmethod
    def from_ids(cls, ids, dtype):
        return cls.expand(ids.ne(1), dtype)
"""


def test_bool_minus_raises() -> None:
    with pytest.raises(RuntimeError, match="Subtraction"):
        1.0 - torch.tensor([True, False])


def test_cls_calls_the_class_helper(found: Found) -> None:
    assert found(CLASSMETHOD) == [(6, "MC512")]
    assert found(CLASSMETHOD.replace("ids.ne(1)", "ids.ne(1).long()")) == []


WRAPPER = """\
import torch.nn.functional as F
from torch import nn

class Profiled(nn.Module):
    def __init__(self, is_causal: bool = True):
        super().__init__()
        self.is_causal = is_causal

    def forward(self, q, k, v, **kwargs):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal, **kwargs)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Profiled(is_causal=True)

    def forward(self, q, k, v, keep):
        return self.attn(q, k, v, attn_mask=keep[:, None, None, :])
"""


def test_sdpa_raises_with_a_mask_and_is_causal_on_math() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, 1, 3, 4)
    with sdpa_kernel(SDPBackend.MATH), pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool),
                                       is_causal=True)


def test_a_wrapper_that_sets_is_causal_meets_its_callers_mask(found: Found) -> None:
    assert found(WRAPPER) == [(18, "MC506")]


def test_a_construction_with_is_causal_false_overrides_the_default(found: Found) -> None:
    assert found(WRAPPER.replace("Profiled(is_causal=True)", "Profiled(is_causal=False)")) == []
    direct = WRAPPER.replace("**kwargs)", "attn_mask=kwargs['mask'])").replace(
        "Profiled(is_causal=True)", "Profiled(is_causal=False)")
    assert found(direct) == []
    # left to its default (True), the class meets the mask: still reported
    assert found(direct.replace("Profiled(is_causal=False)", "Profiled()")) == [(10, "MC506")]


MODULEDICT = """\
import torch
import torch.nn.functional as F
from torch import nn

class Sdpa(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

class Eager(nn.Module):
    def forward(self, q, k, v, mask):
        w = q @ k.transpose(-2, -1)
        w = w + mask
        return w.softmax(-1) @ v

class Block(nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.impl = impl
        self.attn = nn.ModuleDict({"sdpa": Sdpa(), "eager": Eager()})

    def forward(self, q, k, v, keep):
        return self.attn[self.impl](q, k, v, keep[:, None, None, :].bool())
"""


def test_a_bool_mask_added_masks_nothing() -> None:
    scores = torch.zeros(1, 3)
    weights = (scores + torch.tensor([[True, True, False]])).softmax(-1)
    assert weights[0, 2] > 0.1


def test_an_element_picked_from_a_moduledict_does_what_each_does(found: Found) -> None:
    # every call of Eager's forward (the only one is through the dict) passes the bool mask:
    # reported where Eager adds it
    assert found(MODULEDICT) == [(12, "MC509")]
    additive = MODULEDICT.replace("keep[:, None, None, :].bool()",
                                  "torch.zeros(keep.shape, dtype=q.dtype).masked_fill("
                                  "~keep, float('-inf'))[:, None, None, :]")
    assert found(additive) == []


RECORD = """\
from typing import NamedTuple
import torch
from torch import nn

class Inputs(NamedTuple):
    ids: torch.Tensor
    src_mask: torch.Tensor

def collate(ids):
    src_mask = (ids != 0).unsqueeze(1).unsqueeze(3)
    return Inputs(ids, src_mask)

class Attention(nn.Module):
    def forward(self, q, k, inputs: Inputs):
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(inputs.src_mask == 0, float("-inf"))
        return scores.softmax(-1)
"""


def test_a_record_field_read_in_an_expression(found: Found) -> None:
    assert found(RECORD) == [(10, "MC514")]
    assert found(RECORD.replace("unsqueeze(1).unsqueeze(3)", "unsqueeze(1).unsqueeze(2)")) == []
