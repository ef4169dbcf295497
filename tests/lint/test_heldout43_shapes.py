"""The shape of held-out 43 (text-to-motion generation) that its first reading put on another
line: the bad source next to the finding it must give, its correct form next to none, and the
torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# T2M-GPT: a builder named for a keep-mask returns the upper triangle; the attention registers
# it and fills where it `== 0`, the usual idiom for a keep-mask.
KEEP_BUILDER_RETURNS_THE_UPPER_TRIANGLE = """\
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_keep(block_size):
    return torch.triu(torch.ones(block_size, block_size))


class CausalSelfAttention(nn.Module):
    def __init__(self, embed_dim=128, block_size=32):
        super().__init__()
        self.key, self.query = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.register_buffer("mask", causal_keep(block_size).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        k, q = self.key(x), self.query(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C))
        att = att.masked_fill(self.mask[:, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ x
"""


def test_an_upper_keep_triangle_filled_where_zero_shows_the_future() -> None:
    keep = torch.triu(torch.ones(3, 3))
    weights = torch.zeros(3, 3).masked_fill(keep == 0, float("-inf")).softmax(-1)
    assert weights[0, 2] > 0 and weights[2, 0] == 0  # the first sees the last, not the reverse


def test_the_wrong_triangle_is_reported_in_the_builder(found: Found) -> None:
    assert found(KEEP_BUILDER_RETURNS_THE_UPPER_TRIANGLE) == [(9, "MC521")]
    fixed = KEEP_BUILDER_RETURNS_THE_UPPER_TRIANGLE.replace("torch.triu(", "torch.tril(")
    assert found(fixed) == []


def test_a_triangle_made_in_the_same_function_is_reported_at_the_fill(found: Found) -> None:
    inline = KEEP_BUILDER_RETURNS_THE_UPPER_TRIANGLE.replace(
        "self.mask[:, :T, :T] == 0", "torch.triu(torch.ones(T, T)) == 0")
    assert found(inline) == [(22, "MC521")]
