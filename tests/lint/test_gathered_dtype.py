"""MC501 on entries picked from a float32 tensor (fresh18's altasr: a pruned RNN-T loss gathers
float32 log-probs at the targets and fills the rest with -1e30). `gather`, `index_select` and
`take_along_dim` keep their input's dtype, and `torch.full_like` takes its like-tensor's: a
-1e30 there is finite. On a tensor of unknown dtype the fill stays reported."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

PRUNED = """\
import torch
import torch.nn.functional as F

def emit_and_blank(joint, tok, blank, beyond):
    lp = F.log_softmax(joint.float(), dim=-1)
    emit = lp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
    emit = emit.masked_fill(beyond, -1e30)
    empty = torch.full_like(lp[..., blank], -1e30)
    return emit, empty
"""


def test_float32_entries_filled_with_a_large_negative_are_silent(found: Found) -> None:
    assert found(PRUNED) == []
    # without the float32 upcast the log-probs follow the model's dtype, which may be float16
    unknown = PRUNED.replace("joint.float()", "joint")
    assert found(unknown) == [(7, "MC501"), (8, "MC501")]


def test_picking_entries_keeps_the_dtype() -> None:
    index = torch.tensor([[0], [2]])
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(2, 3).to(dtype)
        assert x.gather(-1, index).dtype == dtype
        assert x.index_select(0, torch.tensor([1])).dtype == dtype
        assert torch.take_along_dim(x, index, -1).dtype == dtype
        assert torch.full_like(x[..., 0], -1e4).dtype == dtype
    # and why it matters: float16 cannot hold -1e30
    try:
        torch.zeros(2, dtype=torch.float16).masked_fill(torch.tensor([True, False]), -1e30)
    except RuntimeError as error:
        assert "overflow" in str(error)
    else:
        raise AssertionError("a float16 masked_fill of -1e30 did not raise")
