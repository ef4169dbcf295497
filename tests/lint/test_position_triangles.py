"""A causal mask written as a comparison of positions (`i[:, None] >= i[None, :]`, the way
sliding-window, prefix-LM and streaming code builds it) is a triangle like `tril`'s, and an AND
of keep-masks with it points as it does: MC521 where it reaches an API of the other
convention. Each bad source next to the finding it must give, its correct form next to none,
and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

MHA = """\
import torch
from torch import nn

mha = nn.MultiheadAttention(16, 2, batch_first=True)

def attend(x):
    i = torch.arange(x.size(1))
    keep = i[:, None] >= i[None, :]
    return mha(x, x, x, attn_mask=keep)
"""


def test_a_position_comparison_keep_mask_given_to_mha(found: Found) -> None:
    assert found(MHA) == [(9, "MC521")]
    hide = MHA.replace("keep = i[:, None] >= i[None, :]", "keep = i[None, :] > i[:, None]")
    assert found(hide) == []


def test_the_unsqueeze_spelling_is_read_the_same(found: Found) -> None:
    spelled = MHA.replace("i[:, None] >= i[None, :]", "i.unsqueeze(1) >= i.unsqueeze(0)")
    assert found(spelled) == [(9, "MC521")]


SLIDING = """\
import torch
import torch.nn.functional as F

def sliding(q, k, v, window):
    i = torch.arange(q.size(-2))
    band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~band)
"""


def test_an_inverted_sliding_window_keep_mask_given_to_sdpa(found: Found) -> None:
    assert found(SLIDING) == [(7, "MC521")]
    assert found(SLIDING.replace("attn_mask=~band", "attn_mask=band")) == []


def test_comparing_two_different_position_tensors_is_no_triangle(found: Found) -> None:
    # queries against cached keys: offsets differ, the direction is not the source's to say
    offset = SLIDING.replace("band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < "
                             "window)", "j = torch.arange(k.size(-2))\n    band = i[:, None] >= "
                             "j[None, :]")
    assert found(offset) == []


def test_position_comparisons_make_the_triangles_torch_uses() -> None:
    i = torch.arange(4)
    assert torch.equal(i[:, None] >= i[None, :], torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert torch.equal(i[None, :] > i[:, None],
                       torch.triu(torch.ones(4, 4, dtype=torch.bool), 1))
    # the lower keep-triangle given to MHA as attn_mask (True = masked) lets the first
    # position see the last one
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    changed = x.clone()
    changed[0, 3] += 1.0
    keep = i[:, None] >= i[None, :]
    with torch.no_grad():
        a, _ = mha(x, x, x, attn_mask=keep)
        b, _ = mha(changed, changed, changed, attn_mask=keep)
    assert not torch.allclose(a[0, 0], b[0, 0])
    q = torch.randn(1, 1, 4, 8)
    window = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 2)
    inverted = F.scaled_dot_product_attention(q, q, q, attn_mask=~window)
    right = F.scaled_dot_product_attention(q, q, q, attn_mask=window)
    assert not torch.allclose(inverted, right)


VERIFY = """\
import torch
import torch.nn.functional as F

def verify_mask(n_new, n_total):
    return torch.ones(n_new, n_total, dtype=torch.bool).triu(diagonal=n_total - n_new)

def verify(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=verify_mask(q.size(-2), k.size(-2)))
"""


def test_new_queries_triangle_at_the_end_of_a_cache_is_read(found: Found) -> None:
    # speculative decoding's verify step: the builder's triu keeps each new query's future
    assert found(VERIFY) == [(5, "MC521")]
    right = VERIFY.replace(".triu(diagonal=n_total - n_new)", ".tril(diagonal=n_total - n_new)")
    assert found(right) == []


def test_a_triu_by_a_bare_name_claims_no_triangle(found: Found) -> None:
    # `triu(d)` with a bare d may be a negative band edge: no triangle is claimed, only that it
    # is True = hidden above some diagonal (MC511 at the use, as before)
    bare = VERIFY.replace("diagonal=n_total - n_new", "diagonal=n_total")
    assert found(bare) == [(8, "MC511")]


def test_the_offset_triu_keeps_the_future_of_the_last_queries() -> None:
    n_new, n_total = 2, 5
    keep = torch.ones(n_new, n_total, dtype=torch.bool).triu(diagonal=n_total - n_new)
    # the first new query (position 3) may attend to key 4, its future, and not to key 0
    assert bool(keep[0, 4]) and not bool(keep[0, 0])
    right = torch.ones(n_new, n_total, dtype=torch.bool).tril(diagonal=n_total - n_new)
    assert bool(right[0, 0]) and not bool(right[0, 4])
