"""Shapes of session 37's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 27's, 41's and 63's layers: a keep-mask cast to the query's dtype on its own line,
# then handed to SDPA by name. The cast is the line to change, and the finding sits there.
CAST_THEN_SDPA = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, keep):
    attn_mask = keep[:, None, None, :].to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
"""


def test_a_cast_used_by_its_name_is_reported_at_the_cast(found: Found) -> None:
    cast = line_of(CAST_THEN_SDPA, "attn_mask = keep")
    assert found(CAST_THEN_SDPA) == [(cast, "MC508")]
    fixed = CAST_THEN_SDPA.replace(".to(q.dtype)", ".bool()")
    assert fixed != CAST_THEN_SDPA and found(fixed) == []


def test_a_cast_reshaped_at_its_use_is_reported_at_the_use(found: Found) -> None:
    # held-out 5's and the first held-out set's layers: the use lays the mask on its axes, and
    # either line may be the one to change; they mark the use
    reshaped = CAST_THEN_SDPA.replace(
        "keep[:, None, None, :].to(q.dtype)", "keep.to(q.dtype)").replace(
        "attn_mask=attn_mask)", "attn_mask=attn_mask[:, None, None, :])")
    use = line_of(reshaped, "F.scaled_dot_product_attention")
    assert found(reshaped) == [(use, "MC508")]


def test_a_float_keep_mask_adds_one_to_the_kept_keys() -> None:
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[1, 1, 0]])
    as_float = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :].to(q.dtype))
    as_bool = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :].bool())
    assert not torch.allclose(as_float, as_bool, atol=1e-4)  # the padded key still weighs


# Held-out 72's Temporal Fusion Transformer helper: left padding marked by position < the
# number of pads. That is True at the padding, so filling there is right (no MC519).
PAD_COUNT = """\
import torch


def padding_bias(lengths, max_len, dtype=torch.float32):
    n_pad = max_len - lengths
    pad = torch.arange(max_len)[None, :] < n_pad[:, None]
    return torch.zeros(pad.shape, dtype=dtype).masked_fill(pad, torch.finfo(dtype).min)
"""


def test_positions_below_a_pad_count_are_padding_not_keep(found: Found) -> None:
    assert found(PAD_COUNT) == []
    keep = PAD_COUNT.replace("    n_pad = max_len - lengths\n", "").replace("n_pad", "lengths")
    fill = line_of(keep, "masked_fill(pad")
    assert found(keep) == [(fill, "MC519")]  # `arange < lengths` is True at real positions


def test_positions_below_the_pad_count_are_the_left_padding() -> None:
    lengths = torch.tensor([3, 5])
    pad = torch.arange(5)[None, :] < (5 - lengths)[:, None]
    assert pad.tolist() == [[True, True, False, False, False], [False] * 5]
