"""Names an if/else binds in both branches: the else branch starts from the values before the
`if` (not from the body's), a branch that only raises leaves the body's value, and a float 0/1
padding mask made on one path and added after the join is reported at that branch (MC508)."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# PaddleNLP / Hugging Face style: an additive mask from the pad ids when none is given, the
# tokenizer's 2-D mask lifted and cast otherwise (the cast forgets `(1 - m) * min`).
EXTENDED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0


class Layer(nn.Module):
    def forward(self, q, attention_mask):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=attention_mask)


class Encoder(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(depth)])
        self.proj = nn.Linear(dim, dim)

    def forward(self, hidden, input_ids, attention_mask=None):
        dtype = self.proj.weight.dtype
        big_neg = torch.finfo(dtype).min
        if attention_mask is None:
            attention_mask = (input_ids == PAD_ID).to(dtype)[:, None, None, :] * big_neg
        elif attention_mask.ndim == 2:
            attention_mask = attention_mask[:, None, None, :].to(dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask)
        return hidden
"""


def test_the_lifted_tokenizer_mask_is_not_the_additive_mask_of_the_other_branch() -> None:
    scores = torch.zeros(1, 1, 1, 3)
    keep = torch.tensor([[1, 1, 0]])
    from_ids = (torch.tensor([[5, 7, 0]]) == 0).float()[:, None, None, :] * torch.finfo(
        torch.float32).min
    lifted = keep[:, None, None, :].float()
    assert torch.softmax(scores + from_ids, -1)[0, 0, 0, 2] == 0  # the padding is hidden
    assert torch.softmax(scores + lifted, -1)[0, 0, 0, 2] > 0.1  # +0 at the padding, +1 elsewhere


def test_a_float_keep_mask_made_on_one_branch_is_reported_there(found: Found) -> None:
    assert found(EXTENDED) == [(25, "MC508")]
    fixed = EXTENDED.replace(
        "attention_mask = attention_mask[:, None, None, :].to(dtype)",
        "attention_mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * big_neg")
    assert found(fixed) == []
    as_bool = EXTENDED.replace(
        "attention_mask = (input_ids == PAD_ID).to(dtype)[:, None, None, :] * big_neg",
        "attention_mask = (input_ids != PAD_ID)[:, None, None, :]").replace(
        "attention_mask[:, None, None, :].to(dtype)", "attention_mask[:, None, None, :].bool()")
    assert found(as_bool) == []


def test_the_else_branch_reads_the_value_before_the_if(found: Found) -> None:
    # the body's additive mask is not what the else branch lifts: without the rewind, the
    # else branch read `mask` as additive and the 0/1 cast went unseen
    source = """\
import torch
import torch.nn.functional as F


def attend(q, tokens, attention_mask, use_ids):
    if use_ids:
        attention_mask = (tokens == 0)[:, None, None, :] * -1e4
    else:
        attention_mask = attention_mask[:, None, None, :].float()
    return F.scaled_dot_product_attention(q, q, q, attn_mask=attention_mask)
"""
    assert found(source) == [(9, "MC508")]


def test_an_else_branch_that_raises_leaves_the_body_value(found: Found) -> None:
    # BERT's get_extended_attention_mask: 3-D or 2-D, else raise; the cast keeps 0/1 (the
    # raising branch binds nothing, so the body's value goes on: no rewind to the value before)
    source = """\
import torch


def attend(q, k, attention_mask):
    if attention_mask.dim() == 3:
        extended = attention_mask[:, None, :, :]
    elif attention_mask.dim() == 2:
        extended = attention_mask[:, None, None, :]
    else:
        raise ValueError("bad mask")
    extended = extended.to(dtype=q.dtype)
    scores = q @ k.transpose(-1, -2)
    scores = scores + extended
    return scores.softmax(-1)
"""
    assert found(source) == [(11, "MC508")]  # the cast: the sum takes the name as it is
