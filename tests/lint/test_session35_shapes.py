"""Shapes of session 35's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

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
