"""Where MC521 is reported: a triangle that points the wrong way for its use is reported
where its direction was set when a builder or a closure of the file makes it (the fix goes
there; held-out 14's closure and held-out 24's callable builder mark that line), and at the
use when the use itself turns it, or when an attribute holds it (a buffer may be read right on
one path and wrong on another: minGPT's flash and eager paths). Each bad source next to the
findings it must give, its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

BUILDER = """\
import torch
import torch.nn.functional as F

def causal_keep(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool))

def attend(q, k, v):
    mask = causal_keep(q.size(-2))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""


def test_a_builders_triangle_is_reported_where_the_builder_makes_it(found: Found) -> None:
    assert found(BUILDER) == [(5, "MC521")]
    assert found(BUILDER.replace("torch.triu(", "torch.tril(")) == []


def test_a_triangle_turned_at_its_use_is_reported_at_the_use(found: Found) -> None:
    # the builder's lower triangle is right for SDPA; the caller's `~` turns it
    turned = BUILDER.replace("torch.triu(", "torch.tril(").replace(
        "mask = causal_keep(q.size(-2))", "mask = ~causal_keep(q.size(-2))")
    assert found(turned) == [(9, "MC521")]


def test_a_closure_made_triangle_is_reported_in_the_closure(found: Found) -> None:
    closure = """\
import torch

def make_attention(n):
    cached = None

    def mask():
        nonlocal cached
        if cached is None:
            cached = torch.tril(torch.ones(n, n, dtype=torch.bool))
        return cached

    def attend(scores):
        return scores.masked_fill(mask(), float("-inf")).softmax(-1)

    return attend
"""
    assert found(closure) == [(9, "MC521")]
    assert found(closure.replace("torch.tril(torch.ones(n, n, dtype=torch.bool))",
                                 "torch.triu(torch.ones(n, n, dtype=torch.bool), 1)")) == []


BUFFER = """\
import torch
import torch.nn.functional as F
from torch import nn

class Attention(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.ones(n, n, dtype=torch.bool), 1))

    def forward(self, q, k, v, flash):
        if flash:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
        att = (q @ k.transpose(-2, -1)).masked_fill(self.mask, float("-inf"))
        return att.softmax(-1) @ v
"""


def test_a_buffer_read_both_ways_is_reported_at_the_wrong_use(found: Found) -> None:
    assert found(BUFFER) == [(12, "MC521")]
    assert found(BUFFER.replace("attn_mask=self.mask)", "attn_mask=~self.mask)")) == []


def test_an_upper_triangle_as_sdpa_keep_mask_lets_queries_see_the_future() -> None:
    """SDPA's bool attn_mask is True = may attend: the first query of a `triu` keep-mask sees
    every key, and the last query sees only itself."""
    torch.manual_seed(0)
    q = k = torch.randn(1, 1, 3, 4)
    v = torch.eye(3)[None, None]
    upper = torch.triu(torch.ones(3, 3, dtype=torch.bool))
    weights = F.scaled_dot_product_attention(q, k, v, attn_mask=upper)[0, 0]
    assert torch.all(weights[0] > 0)
    assert torch.allclose(weights[2], torch.tensor([0.0, 0.0, 1.0]))
