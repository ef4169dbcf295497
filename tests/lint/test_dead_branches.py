"""A branch that cannot run is not read: `name = None` then `if name is not None:` with
nothing between that binds the name (fresh24's ComfyUI ACE-Step attention, copied from code
where the name was a parameter). The finding its body would give stays where the name may hold
something else: bound on another path before the test, or in a loop whose earlier turn binds
it."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

ACE = """\
import torch


def attend(q, k, window, pad=None):
    n = q.shape[-2]
    attn_bias = None
    if window is not None:
        min_value = torch.finfo(q.dtype).min
        future = torch.ones(n, n, dtype=torch.bool).triu(window)
        window_bias = torch.zeros(n, n, dtype=q.dtype).masked_fill_(future, min_value)
        if attn_bias is not None:
            base = torch.zeros_like(window_bias).masked_fill_(~attn_bias, min_value)
            attn_bias = base + window_bias
        else:
            attn_bias = window_bias
    return torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=attn_bias)
"""


def test_two_finfo_min_planes_sum_to_minus_inf() -> None:
    low = torch.finfo(torch.float16).min
    assert (torch.tensor([low], dtype=torch.float16) * 2).isinf().all()


def test_a_branch_on_a_name_just_bound_to_none_is_dead(found: Found) -> None:
    assert found(ACE) == []


def test_the_branch_is_read_where_another_path_binds_the_name(found: Found) -> None:
    live = ACE.replace("    attn_bias = None\n",
                       "    attn_bias = None\n    if pad is not None:\n        attn_bias = pad\n")
    assert found(live) == [(15, "MC513")]
    # bound to None in an outer block, tested in a loop that binds it on an earlier turn
    looped = ACE.replace("    if window is not None:\n", "    for _ in range(2):\n").replace(
        "        else:\n            attn_bias = window_bias\n",
        "        attn_bias = pad\n")
    assert [code for _, code in found(looped)] == ["MC513"]
