"""The shapes of held-out 39 (recommenders, code models, retrieval, speech) that its first
reading missed, each bad source next to the findings it must give, its correct form next to
none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# BERT4Rec: item ids compared with 0 before they go through the embedding, the padding test
# laid out for SDPA, handed down through a lambda (the annotated transformer's sublayer).
ITEM_IDS_THROUGH_A_LAMBDA = """\
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Sublayer(nn.Module):
    def forward(self, x, sublayer):
        return x + sublayer(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.sublayer = Sublayer()

    def forward(self, x, mask):
        return self.sublayer(x, lambda _x: self.attention(_x, _x, _x, mask=mask))


class BERT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(100, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x):
        padding = x == 0
        x = self.embedding(x)
        mask = padding[:, None, None, :]
        for block in self.blocks:
            x = block(x, mask)
        return x
"""


def test_a_padding_test_keeps_only_the_padding_in_sdpa() -> None:
    q = torch.tensor([[[[1.0], [1.0]]]])
    v = torch.tensor([[[[1.0], [5.0]]]])
    ids = torch.tensor([[7, 0]])
    padding = (ids == 0)[:, None, None, :]
    out = F.scaled_dot_product_attention(q, q, v, attn_mask=padding)
    assert torch.allclose(out, torch.tensor(5.0))  # only the padded key is read


def test_ids_fed_to_an_embedding_compared_with_zero(found: Found) -> None:
    assert found(ITEM_IDS_THROUGH_A_LAMBDA) == [(34, "MC511")]
    fixed = ITEM_IDS_THROUGH_A_LAMBDA.replace("padding = x == 0", "padding = x != 0")
    assert found(fixed) == []
    # a position or time embedding takes other integers than token ids
    positions = ITEM_IDS_THROUGH_A_LAMBDA.replace("self.embedding(x)", "self.pos_embedding(x)")
    assert found(positions) == []
    # the same with the attention called directly: the lambda adds nothing and hides nothing
    direct = ITEM_IDS_THROUGH_A_LAMBDA.replace(
        "self.sublayer(x, lambda _x: self.attention(_x, _x, _x, mask=mask))",
        "x + self.attention(x, x, x, mask=mask)")
    assert found(direct) == [(34, "MC511")]
    # a lambda's own parameter named like the function's is the lambda's
    shadowed = ITEM_IDS_THROUGH_A_LAMBDA.replace(
        "lambda _x: self.attention(_x, _x, _x, mask=mask)",
        "lambda mask: self.attention(x, x, x, mask=mask)")
    assert found(shadowed) == []


# CodeT5: the cross-attention exists only in the decoder (`X(...) if is_decoder else None`),
# and fills where the tokenizer's keep-mask is True.
OPTIONAL_CROSS_ATTENTION = """\
import torch
from torch import nn


class CrossAttention(nn.Module):
    def forward(self, scores, encoder_attention_mask=None):
        return scores.masked_fill(encoder_attention_mask[:, None, None, :].bool(),
                                  torch.finfo(scores.dtype).min).softmax(-1)


class Block(nn.Module):
    def __init__(self, is_decoder):
        super().__init__()
        self.cross = CrossAttention() if is_decoder else None

    def forward(self, scores, encoder_mask=None):
        if self.cross is not None:
            scores = self.cross(scores, encoder_mask)
        return scores


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(True)

    def forward(self, scores, input_ids):
        return self.block(scores, (input_ids != 0).long())
"""


def test_a_keep_mask_as_the_fill_condition_masks_the_real_tokens() -> None:
    scores = torch.zeros(1, 1, 1, 2)
    keep = torch.tensor([[1, 0]])
    weights = scores.masked_fill(keep[:, None, None, :].bool(), -1e4).softmax(-1)
    assert weights[0, 0, 0].tolist() == [0.0, 1.0]  # all the weight on the padding


def test_an_instance_held_on_one_branch_of_a_conditional(found: Found) -> None:
    assert found(OPTIONAL_CROSS_ATTENTION) == [(7, "MC519")]
    fixed = OPTIONAL_CROSS_ATTENTION.replace(
        "encoder_attention_mask[:, None, None, :].bool()",
        "encoder_attention_mask[:, None, None, :] == 0")
    assert found(fixed) == []


# FiD: the model's entry point takes the encoder's mask as the tokenizer gives it, casts it to
# the model's dtype and hands it to SDPA (the inversion Hugging Face's T5 does is left out).
ENCODER_MASK_CAST_TO_FLOAT = """\
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, input_ids, attention_mask=None, encoder_states=None,
                encoder_attention_mask=None):
        h = encoder_states
        mask = encoder_attention_mask[:, None, None, :].to(h.dtype)
        return self.attn(h, h, h, mask=mask)
"""


def test_a_float_zero_one_mask_masks_nothing_in_sdpa() -> None:
    q = torch.tensor([[[[1.0], [1.0]]]])
    v = torch.tensor([[[[1.0], [5.0]]]])
    keep = torch.tensor([[1, 0]])
    out = F.scaled_dot_product_attention(q, q, v, attn_mask=keep[:, None, None, :].float())
    assert 2.0 < out[0, 0, 0, 0] < 4.0  # the padded key still weighs about half


def test_the_encoder_mask_of_a_models_entry_point(found: Found) -> None:
    assert found(ENCODER_MASK_CAST_TO_FLOAT) == [(18, "MC508")]
    # a layer's `encoder_attention_mask` (no input_ids beside it) is often inverted already
    layer = ENCODER_MASK_CAST_TO_FLOAT.replace("input_ids, attention_mask=None, ", "x, ")
    assert found(layer) == []
    fixed = ENCODER_MASK_CAST_TO_FLOAT.replace(".to(h.dtype)", ".bool()")
    assert found(fixed) == []


# GAT (held-out 19): the batch builder's float 0/1 adjacency reaches the layer only through
# `model(*build(...))`; each position of the spread is what the function returns there.
SPREAD_FROM_A_BUILDER = """\
import torch
from torch import nn


def build(h, dist):
    adj = (dist < 1.6).float()
    return h, adj, dist


class Layer(nn.Module):
    def forward(self, h, adj):
        e = h @ h.transpose(-1, -2)
        attention = e * adj
        return torch.softmax(attention, dim=-1) @ h


def main(h, dist):
    model = Layer()
    return model(*build(h, dist))
"""


def test_a_zero_one_mask_multiplied_into_scores_keeps_weight_where_it_is_zero() -> None:
    e = torch.tensor([[2.0, 1.0]])
    adj = torch.tensor([[1.0, 0.0]])
    assert torch.softmax(e * adj, dim=-1)[0, 1] > 0.1  # exp(0) for the "missing" edge


def test_a_call_that_spreads_a_returned_tuple(found: Found) -> None:
    assert found(SPREAD_FROM_A_BUILDER) == [(13, "MC520")]
    sliced = SPREAD_FROM_A_BUILDER.replace("model(*build(h, dist))",
                                           "model(*build(h, dist)[:2])")
    assert found(sliced) == [(13, "MC520")]
    # what a spread of anything else passes stays unknown
    other = SPREAD_FROM_A_BUILDER.replace("model(*build(h, dist))", "model(*dist)")
    assert found(other) == []
    fixed = SPREAD_FROM_A_BUILDER.replace("attention = e * adj",
                                          "attention = e.masked_fill(adj == 0, -1e4)")
    assert found(fixed) == []


# ESPnet's decoding copy: the model cast with `getattr(torch, dtype)` in a file that names
# "float16", and the attention filling with the float32 minimum.
CAST_BY_A_DTYPE_NAME = """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, scores, mask):
        scores = scores.masked_fill(mask, torch.finfo(torch.float32).min)
        return scores.softmax(-1)


class Decoder:
    def __init__(self, model, dtype="float32"):
        self.model = model.to(dtype=getattr(torch, dtype))


def main(model):
    for dtype in ("float32", "float16"):
        Decoder(model, dtype)
"""


def test_a_cast_by_a_dtype_name_that_may_be_half(found: Found) -> None:
    assert found(CAST_BY_A_DTYPE_NAME) == [(7, "MC517")]
    full_only = CAST_BY_A_DTYPE_NAME.replace('("float32", "float16")', '("float32", "float64")')
    assert found(full_only) == []
    fixed = CAST_BY_A_DTYPE_NAME.replace("torch.finfo(torch.float32)", "torch.finfo(scores.dtype)")
    assert found(fixed) == []


# 3DETR: the encoder layers get the padding mask with SDPA's head and query axes added; the
# decoder gets the same mask bare, and hands it on to SDPA's attn_mask.
AXES_ADDED_FOR_ONE_CALL_ONLY = """\
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, v, attn_mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, src_mask=None):
        return x + self.attn(x, x, x, attn_mask=src_mask)


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, tgt, memory, memory_mask=None):
        return tgt + self.attn(tgt, memory, memory, attn_mask=memory_mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = EncoderLayer()
        self.decoder = DecoderLayer()

    def forward(self, x, tgt, keep):
        x = self.encoder(x, src_mask=keep[:, None, None, :])
        return self.decoder(tgt, x, memory_mask=keep)
"""


def test_a_batch_by_keys_mask_is_read_as_queries_by_keys() -> None:
    q = torch.zeros(3, 1, 2, 1)  # batch 3, two queries
    keep = torch.tensor([[True, False], [True, True], [True, True]])
    try:
        F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    except RuntimeError:
        pass  # (3, 2) is read as (queries, keys): 3 rows for 2 queries
    else:
        raise AssertionError("a (batch, seq) attn_mask with batch != queries did not raise")


def test_a_mask_passed_bare_beside_its_own_four_axis_form(found: Found) -> None:
    assert found(AXES_ADDED_FOR_ONE_CALL_ONLY) == [(36, "MC515")]
    fixed = AXES_ADDED_FOR_ONE_CALL_ONLY.replace("memory_mask=keep)",
                                                 "memory_mask=keep[:, None, None, :])")
    assert found(fixed) == []
    # without the other call, nothing shows the mask's axes
    alone = AXES_ADDED_FOR_ONE_CALL_ONLY.replace(
        "        x = self.encoder(x, src_mask=keep[:, None, None, :])\n", "")
    assert found(alone) == []


def test_a_cast_by_a_dtype_name_of_torchs_alias(found: Found) -> None:
    aliased = CAST_BY_A_DTYPE_NAME.replace("import torch\n", "import torch\nimport torch as th\n")
    aliased = aliased.replace("getattr(torch, dtype)", "getattr(th, dtype)")
    assert found(aliased) == [(8, "MC517")]
