"""Held-out 26's three misses, as the shapes people paste into bug reports: a padding mask
handed to SDPA through a named lambda (MC515), a float 0/1 mask typed in as a tensor literal
and multiplied into the logits inside the function it is passed to (MC520), and a bool lower
triangle handed to a helper that gives it to `nn.Transformer` as `tgt_mask` (MC521, reported
once however many calls pass it). Each bad source next to the findings it must give, its
correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

LAMBDA = """\
import torch
import torch.nn.functional as fn

attend = lambda q, k, v, m: fn.scaled_dot_product_attention(q, k, v, attn_mask=m)

def encode(ids, q, k, v):
    m = ids != 0
    return attend(q, k, v, m)
"""


def test_a_padding_mask_through_a_named_lambda_is_seen(found: Found) -> None:
    assert found(LAMBDA) == [(8, "MC515")]
    assert found(LAMBDA.replace("attend(q, k, v, m)", "attend(q, k, v, m[:, None, None, :])")
                 ) == []


def test_an_annotated_lambda_is_read_like_the_plain_one(found: Found) -> None:
    annotated = LAMBDA.replace("attend = lambda", "attend: object = lambda")
    assert found(annotated) == [(8, "MC515")]


def test_a_lambda_that_is_not_named_stays_a_value(found: Found) -> None:
    # passed inline, the lambda names no function of the file: nothing to follow
    inline = """\
import torch
import torch.nn.functional as fn

def encode(ids, q, k, v):
    m = ids != 0
    return (lambda a: fn.scaled_dot_product_attention(q, k, v, attn_mask=a[:, None, None, :]))(m)
"""
    assert found(inline) == []


LITERAL = """\
import torch

m = torch.tensor([[1.0, 1.0, 0.0],
                  [1.0, 0.0, 0.0]])

def pool(h, mask):
    logits = h.sum(-1)
    w = torch.softmax(logits * mask, dim=-1)
    return (w.unsqueeze(-1) * h).sum(1)

pooled = pool(torch.randn(2, 3, 4), m)
"""


def test_a_literal_zero_one_mask_passed_to_a_pooling_is_seen_there(found: Found) -> None:
    assert found(LITERAL) == [(8, "MC520")]
    filled = LITERAL.replace("torch.softmax(logits * mask, dim=-1)",
                             "torch.softmax(logits.masked_fill(mask == 0, float('-inf')), -1)")
    assert found(filled) == []


def test_an_int_or_weight_literal_is_no_zero_one_float_seed(found: Found) -> None:
    # weights that are not 0/1 scale the logits on purpose (a temperature per token)
    weights = LITERAL.replace("[[1.0, 1.0, 0.0],", "[[1.0, 0.5, 2.0],").replace(
        "[1.0, 0.0, 0.0]]", "[0.5, 1.0, 1.5]]")
    assert found(weights) == []


def test_multiplying_logits_by_a_zero_one_mask_keeps_weight_on_the_padding() -> None:
    logits = torch.tensor([[2.0, 1.0, 5.0]])
    keep = torch.tensor([[1.0, 1.0, 0.0]])
    w = torch.softmax(logits * keep, dim=-1)
    assert w[0, 2] > 0.05  # exp(0) against exp(2) and exp(1): the padded token weighs
    w_ok = torch.softmax(logits.masked_fill(keep == 0, float("-inf")), dim=-1)
    assert w_ok[0, 2] == 0


COPY_TASK = """\
import torch
from torch import nn

model = nn.Transformer(32, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                       batch_first=True)


def decode(src, tgt, tgt_mask):
    return model(src, tgt, tgt_mask=tgt_mask)


for step in range(3):
    src = torch.randn(2, 6, 32)
    tgt_mask = torch.tril(torch.ones(6, 6)) == 1
    out = decode(src, src, tgt_mask)

again = decode(src[:1], src[:1], tgt_mask)
greedy = decode(src, src, model.generate_square_subsequent_mask(6))
"""


def test_a_keep_triangle_handed_to_a_transformer_helper_is_reported_once(found: Found) -> None:
    # two calls pass the same triangle: one bug, one finding; the third call passes torch's
    # own float mask, which is right
    assert found(COPY_TASK) == [(15, "MC521")]
    right = COPY_TASK.replace("torch.tril(torch.ones(6, 6)) == 1",
                              "torch.triu(torch.ones(6, 6), 1) == 1")
    assert found(right) == []


def test_a_helper_that_inverts_the_triangle_itself_is_silent(found: Found) -> None:
    inverted = COPY_TASK.replace("tgt_mask=tgt_mask)", "tgt_mask=~tgt_mask)")
    assert found(inverted) == []


def test_multihead_attention_reads_a_bool_lower_triangle_as_masking_the_past() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    keep_lower = torch.tril(torch.ones(4, 4)) == 1
    changed = x.clone()
    changed[0, 3] += 1.0  # the last (future) token
    with torch.no_grad():
        a, _ = mha(x, x, x, attn_mask=keep_lower)
        b, _ = mha(changed, changed, changed, attn_mask=keep_lower)
        # position 0 sees the future token: True = masked hides the past
        assert not torch.allclose(a[0, 0], b[0, 0])
        right = ~keep_lower
        a, _ = mha(x, x, x, attn_mask=right)
        b, _ = mha(changed, changed, changed, attn_mask=right)
        assert torch.allclose(a[0, 0], b[0, 0])


def test_sdpa_reads_a_two_d_padding_mask_as_queries_by_keys() -> None:
    q = torch.randn(3, 2, 3, 4)  # batch == queries: the (batch, seq) mask is accepted
    pad_keep = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    wrong = F.scaled_dot_product_attention(q, q, q, attn_mask=pad_keep)
    right = F.scaled_dot_product_attention(q, q, q, attn_mask=pad_keep[:, None, None, :])
    # sequence 0 has no padding, yet its query 1 is given sequence 1's padding
    assert not torch.allclose(wrong[0], right[0])
