"""The shapes of held-out 36 (recommendation, knowledge tracing, forecasting, music) that its
first reading missed, each bad source next to the findings it must give, its correct form next
to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# SASRec builds its causal mask in a helper and hands it to nn.MultiheadAttention, kept in a
# ModuleList filled by `append`.
HELPER_TRIANGLE = """\
import torch


def causal_attention_mask(tl, device):
    return torch.triu(torch.ones((tl, tl), dtype=torch.bool, device=device))


class Blocks(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attention_layers = torch.nn.ModuleList()
        for _ in range(2):
            self.attention_layers.append(torch.nn.MultiheadAttention(d, 1))

    def forward(self, seqs):
        attention_mask = causal_attention_mask(seqs.shape[0], seqs.device)
        for i in range(len(self.attention_layers)):
            seqs, _ = self.attention_layers[i](seqs, seqs, seqs, attn_mask=attention_mask)
        return seqs
"""


def test_a_triu_with_diagonal_zero_empties_the_first_row_of_mha() -> None:
    mha = torch.nn.MultiheadAttention(4, 1)
    x = torch.randn(3, 1, 4)
    hides_diagonal = torch.triu(torch.ones(3, 3, dtype=torch.bool))
    out, _ = mha(x, x, x, attn_mask=hides_diagonal)
    assert torch.isnan(out[0]).all()  # the first query sees nothing
    out, _ = mha(x, x, x, attn_mask=torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1))
    assert not torch.isnan(out).any()


def test_a_helper_triangle_reaching_multihead_attention(found: Found) -> None:
    assert found(HELPER_TRIANGLE) == [(5, "MC503")]
    fixed = HELPER_TRIANGLE.replace("device=device))", "device=device), diagonal=1)")
    assert found(fixed) == []


# TimesFM: the padding plane is scaled in place by finfo.min, the causal plane built from a
# comparison, and `merge_masks` adds them after widening one with torch.minimum.
SUMMED_PLANES = """\
import torch


def convert_paddings_to_mask(paddings, dtype=torch.float32):
    attention_mask = paddings.detach().clone()[:, None, None, :]
    attention_mask *= torch.finfo(dtype).min
    return attention_mask


def causal_mask(x):
    neg = torch.finfo(x.dtype).min
    n = x.shape[1]
    return (torch.arange(n)[:, None] < torch.arange(n)[None, :]).to(x.dtype) * neg


def merge_masks(a, b):
    if a.shape[2] != b.shape[2]:
        a = torch.minimum(a.transpose(-1, -2), a)
    return a + b


def forward(x, paddings):
    return merge_masks(convert_paddings_to_mask(paddings, x.dtype), causal_mask(x))
"""


def test_two_finfo_min_planes_overflow_where_both_hide() -> None:
    low = torch.finfo(torch.float32).min
    both = torch.tensor([low, low]) + torch.tensor([low, 0.0])
    assert both[0] == float("-inf") and both[1] == low
    assert torch.isnan(torch.softmax(torch.full((3,), low) * 2, -1)).all()
    # a row hidden by one plane everywhere is uniform; where the other hides part of it too,
    # the weight goes to the keys only one plane hides
    assert torch.allclose(torch.softmax(torch.full((3,), low), -1), torch.full((3,), 1 / 3))
    part = torch.softmax(torch.tensor([low, low + low, low + low]), -1)
    assert part.tolist() == [1.0, 0.0, 0.0]


def test_finfo_min_planes_made_by_scaling_are_summed(found: Found) -> None:
    assert found(SUMMED_PLANES) == [(19, "MC513")]
    assert found(SUMMED_PLANES.replace("return a + b", "return torch.minimum(a, b)")) == []


# AKT's `attention` is a module-level function its forward calls; it zero-pads the softmax's
# output in place.
SOFTMAX_FILLED_IN_PLACE = """\
import torch
import torch.nn.functional as F


def attention(q, k, mask):
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = F.softmax(scores, dim=-1)
    scores.masked_fill_(mask == 0, 0.0)
    return scores


class Attention(torch.nn.Module):
    def forward(self, q, k, mask):
        return attention(q, k, mask)
"""


def test_filling_a_softmax_output_in_place_breaks_backward() -> None:
    scores = torch.randn(2, 2, requires_grad=True)
    weights = torch.softmax(scores, -1)
    weights.masked_fill_(torch.tensor([[False, True], [False, False]]), 0.0)
    try:
        weights.sum().backward()
    except RuntimeError as error:
        assert "inplace operation" in str(error)
    else:
        raise AssertionError("backward ran through an overwritten softmax output")


def test_a_module_level_function_a_forward_calls_runs_with_grad(found: Found) -> None:
    assert found(SOFTMAX_FILLED_IN_PLACE) == [(8, "MC505")]
    fixed = SOFTMAX_FILLED_IN_PLACE.replace("    scores.masked_fill_(mask == 0, 0.0)\n",
                                            "    scores = scores.masked_fill(mask == 0, 0.0)\n")
    assert found(fixed) == []
    # no forward calls it: whether it runs with grad is not for this file to say
    alone = SOFTMAX_FILLED_IN_PLACE.split("\n\nclass")[0] + "\n"
    assert found(alone) == []
    # probabilities drawn from (sglang's sampler): no backward runs through multinomial
    sampled = SOFTMAX_FILLED_IN_PLACE.replace(
        "    return scores\n", "    return torch.multinomial(scores, 1)\n")
    assert found(sampled) == []


# Music Transformer: the layers live in `nn.ModuleList(EncoderLayer(...) for ...)` and are
# called as `self.enc_layers[i](x, mask)`; the relative attention multiplies its logits by the
# additive mask the model builds.
SUBSCRIPTED_LAYERS = """\
import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def forward(self, x, mask=None):
        logits = x @ x.transpose(-1, -2)
        if mask is not None:
            logits = logits * mask
        return F.softmax(logits, -1) @ x


class Encoder(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.enc_layers = torch.nn.ModuleList(Attention() for _ in range(n))

    def forward(self, x, mask=None):
        for i in range(len(self.enc_layers)):
            x = self.enc_layers[i](x, mask)
        return x


def look_ahead(n):
    return torch.triu(torch.full((n, n), float("-inf")), diagonal=1)


encoder = Encoder(2)
encoder(torch.randn(1, 4, 8), look_ahead(4))
"""


def test_an_additive_mask_through_a_subscripted_module_list(found: Found) -> None:
    assert found(SUBSCRIPTED_LAYERS) == [(9, "MC523")]
    assert found(SUBSCRIPTED_LAYERS.replace("logits * mask", "logits + mask")) == []
