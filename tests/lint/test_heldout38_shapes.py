"""The shapes of held-out 38 (robot policies, tracking, OCR, medical imaging, table QA) that its
first reading missed, each bad source next to the findings it must give, its correct form next
to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# Swin-UNETR: the shifted-window mask reaches the attention only on the branch that shifts; the
# other branch binds None in a tuple assignment. The mask is a float 0/1 matrix multiplied into
# the logits.
NONE_ON_THE_OTHER_BRANCH = """\
import torch
from torch import nn


def compute_mask(a):
    return (a.unsqueeze(1) == a.unsqueeze(2)).float()


class Attn(nn.Module):
    def forward(self, attn, mask=None):
        if mask is not None:
            attn = attn * mask
        return attn.softmax(-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()

    def forward(self, x, mask_matrix, shift):
        if shift:
            attn_mask = mask_matrix
        else:
            x, attn_mask = x, None
        return self.attn(x, mask=attn_mask)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = Block()

    def forward(self, x, a):
        return self.blk(x, compute_mask(a), True)
"""


def test_a_zero_one_mask_multiplied_into_logits_keeps_weight_where_it_is_zero() -> None:
    logits = torch.tensor([[2.0, 1.0]])
    keep = torch.tensor([[1.0, 0.0]])
    weights = (logits * keep).softmax(-1)
    assert weights[0, 1] > 0.1  # the "masked" key still gets exp(0)


def test_a_branch_that_binds_none_adds_nothing_to_the_join(found: Found) -> None:
    assert found(NONE_ON_THE_OTHER_BRANCH) == [(12, "MC520")]
    plain = NONE_ON_THE_OTHER_BRANCH.replace("            x, attn_mask = x, None",
                                             "            attn_mask = None")
    assert found(plain) == [(12, "MC520")]
    fixed = NONE_ON_THE_OTHER_BRANCH.replace("attn = attn * mask",
                                             "attn = attn.masked_fill(mask == 0, -1e4)")
    assert found(fixed) == []


def test_a_branch_that_binds_another_mask_still_joins_to_nothing(found: Found) -> None:
    other = NONE_ON_THE_OTHER_BRANCH.replace("            x, attn_mask = x, None",
                                             "            attn_mask = x")
    assert found(other) == []


# TAPAS: the tokenizer's mask laid out with `.unsqueeze(1).unsqueeze(3)` in the model and handed
# down two calls to a fill of the scores.
UNSQUEEZED_ONTO_THE_QUERY_AXIS = """\
import torch
from torch import nn


class SelfAttention(nn.Module):
    def forward(self, scores, attention_mask):
        scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
        return scores.softmax(dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = SelfAttention()

    def forward(self, scores, attention_mask):
        return self.attention(scores, attention_mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, input_ids, attention_mask, scores):
        extended = attention_mask.unsqueeze(1).unsqueeze(3)
        for layer in self.layer:
            scores = layer(scores, extended)
        return scores
"""


def test_a_mask_on_the_query_axis_hides_padded_queries_not_keys() -> None:
    scores = torch.zeros(1, 1, 2, 2)
    keep = torch.tensor([[1, 0]])
    wrong = scores.masked_fill(keep.unsqueeze(1).unsqueeze(3) == 0, -1e4).softmax(-1)
    right = scores.masked_fill(keep.unsqueeze(1).unsqueeze(2) == 0, -1e4).softmax(-1)
    assert wrong[0, 0, 0].tolist() == [0.5, 0.5]  # the padded key keeps its weight
    assert right[0, 0, 0].tolist() == [1.0, 0.0]


def test_a_tokenizer_mask_unsqueezed_onto_the_query_axis(found: Found) -> None:
    assert found(UNSQUEEZED_ONTO_THE_QUERY_AXIS) == [(26, "MC514")]
    indexed = UNSQUEEZED_ONTO_THE_QUERY_AXIS.replace(".unsqueeze(1).unsqueeze(3)",
                                                     "[:, None, :, None]")
    assert found(indexed) == [(26, "MC514")]
    fixed = UNSQUEEZED_ONTO_THE_QUERY_AXIS.replace(".unsqueeze(1).unsqueeze(3)",
                                                   ".unsqueeze(1).unsqueeze(2)")
    assert found(fixed) == []


# The streaming speech enhancer: the attention fills unknown-dtype scores with the float32
# minimum, and the file runs its model in float16 through `.to(dtype)` of a parameter whose
# default is torch.float16.
CAST_THROUGH_A_DTYPE_PARAMETER = """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, mask):
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
        return scores.softmax(-1)


class Streamer:
    def __init__(self, model, dtype=torch.float16):
        self.model = model.to(dtype)
"""


def test_the_float32_minimum_does_not_fit_float16() -> None:
    scores = torch.zeros(1, 2, dtype=torch.float16)
    mask = torch.tensor([[True, False]])
    try:
        scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    except RuntimeError as error:
        assert "overflow" in str(error)
    else:
        raise AssertionError("masked_fill of float16 with the float32 minimum did not raise")


def test_a_cast_to_a_dtype_parameter_that_defaults_to_half(found: Found) -> None:
    assert found(CAST_THROUGH_A_DTYPE_PARAMETER) == [(8, "MC517")]
    keyword = CAST_THROUGH_A_DTYPE_PARAMETER.replace("model.to(dtype)", "model.to(dtype=dtype)")
    assert found(keyword) == [(8, "MC517")]
    full = CAST_THROUGH_A_DTYPE_PARAMETER.replace("dtype=torch.float16", "dtype=torch.float32")
    assert found(full) == []
    other_name = CAST_THROUGH_A_DTYPE_PARAMETER.replace("model.to(dtype)", "model.to(device)")
    assert found(other_name) == []
    # a call's keyword binds no name: the dtype the model is cast to is not known to be half
    keyword_only = CAST_THROUGH_A_DTYPE_PARAMETER.replace(
        "def __init__(self, model, dtype=torch.float16):",
        "def __init__(self, model, dtype):\n        self.buf = torch.zeros(2, dtype=torch.float16)")
    assert found(keyword_only) == []
    fixed = CAST_THROUGH_A_DTYPE_PARAMETER.replace("torch.finfo(torch.float32)",
                                                   "torch.finfo(scores.dtype)")
    assert found(fixed) == []


# Diffusion Policy's transformer: the encoder layer adds the head and query axes to the mask it
# is given, the decoder layer hands the same (batch, seq) mask to the attention bare.
AXES_ADDED_BY_A_SIBLING_LAYER = """\
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, kv, keep=None):
        if keep is None:
            return F.scaled_dot_product_attention(q, kv, kv)
        return F.scaled_dot_product_attention(q, kv, kv, attn_mask=keep)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, cond_keep):
        return x + self.attn(x, x, keep=cond_keep[:, None, None, :])


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.cross = Attention()

    def forward(self, x, memory, memory_keep):
        return x + self.cross(x, memory, keep=memory_keep)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = EncoderLayer()
        self.decoder = DecoderLayer()

    def forward(self, x, cond, cond_is_pad):
        keep = torch.cat([cond_is_pad.new_ones(cond.shape[0], 1), ~cond_is_pad], dim=1)
        memory = self.encoder(cond, keep)
        return self.decoder(x, memory, keep)
"""


def test_a_mask_one_layer_gives_four_axes_and_its_sibling_hands_on_bare(found: Found) -> None:
    # reported where the decoder layer hands it to the attention (line 28)
    assert found(AXES_ADDED_BY_A_SIBLING_LAYER) == [(28, "MC515")]
    fixed = AXES_ADDED_BY_A_SIBLING_LAYER.replace("keep=memory_keep)",
                                                  "keep=memory_keep[:, None, None, :])")
    assert found(fixed) == []
    # a mask rebound between the two calls is another tensor
    rebound = AXES_ADDED_BY_A_SIBLING_LAYER.replace(
        "        return self.decoder(x, memory, keep)",
        "        keep = self.square(keep)\n        return self.decoder(x, memory, keep)")
    assert found(rebound) == []
    # without the encoder's call, nothing shows the mask's axes
    alone = AXES_ADDED_BY_A_SIBLING_LAYER.replace(
        "        memory = self.encoder(cond, keep)\n", "        memory = cond\n")
    assert found(alone) == []
