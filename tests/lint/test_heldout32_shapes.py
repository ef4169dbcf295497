"""The shapes of held-out 32 (recommender, time-series, tabular, graph and RL transformers) that
its first reading missed, each bad source next to the findings it must give, its correct form
next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# Informer's mask class: the triangle made in __init__ and read back through a property.
INFORMER = """\
import numpy as np
import torch


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        with torch.no_grad():
            self._mask = torch.triu(torch.ones([B, 1, L, L], dtype=torch.bool)).to(device)

    @property
    def mask(self):
        return self._mask


class FullAttention(torch.nn.Module):
    def forward(self, queries, keys, attn_mask=None):
        B, L = queries.shape[:2]
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if attn_mask is None:
            attn_mask = TriangularCausalMask(B, L, device=queries.device)
        scores = scores.masked_fill(attn_mask.mask, -np.inf)
        return torch.softmax(scores, dim=-1)
"""


def test_a_triu_with_the_diagonal_empties_the_first_row() -> None:
    hidden = torch.triu(torch.ones(3, 3, dtype=torch.bool))
    weights = torch.zeros(3, 3).masked_fill(hidden, float("-inf")).softmax(-1)
    assert torch.isnan(weights[0]).all()


def test_a_triangle_read_through_a_property_is_reported_where_it_is_made(found: Found) -> None:
    assert found(INFORMER) == [(8, "MC503")]
    fixed = INFORMER.replace("dtype=torch.bool))", "dtype=torch.bool), diagonal=1)")
    assert found(fixed) == []
    # a diagonal computed at run time may be anything (ring attention's `triu(offset + d)`)
    computed = INFORMER.replace("dtype=torch.bool))", "dtype=torch.bool), B - L)")
    assert found(computed) == []


# BERT4Rec: blocks called by `.forward`, the attention called inside a lambda, every call
# handing down the keep-mask that the innermost fill reads as True = masked.
BERT4REC = """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, scores, mask=None):
        if mask is not None:
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        return scores.softmax(-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()

    def forward(self, x, mask):
        return self.sublayer(x, lambda y: self.attention.forward(y, mask=mask))

    def sublayer(self, x, fn):
        return x + fn(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, input_ids, attention_mask=None):
        keep = attention_mask[:, None, None, :].bool()
        x = input_ids.float()
        for block in self.blocks:
            x = block.forward(x, keep)
        return x
"""


def test_a_keep_mask_as_the_fill_condition_hides_the_real_tokens() -> None:
    keep = torch.tensor([[True, True, False]])
    weights = torch.zeros(1, 3).masked_fill(keep, torch.finfo(torch.float32).min).softmax(-1)
    assert weights[0, 2] > 0.99  # all the weight on the padding


def test_forward_calls_and_lambdas_carry_the_mask_to_the_fill(found: Found) -> None:
    assert found(BERT4REC) == [(8, "MC519")]
    fixed = BERT4REC.replace("masked_fill(mask,", "masked_fill(~mask,")
    assert found(fixed) == []


# BST: the collated int64 mask with a kept target position appended, inverted with `~`.
BST = """\
import torch
from torch import nn


class BST(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, **batch):
        x = batch["x"]
        seq_mask = torch.cat([batch["attention_mask"],
                              batch["attention_mask"].new_ones(x.size(0), 1)], dim=1)
        padding_mask = ~seq_mask
        return self.encoder(x, src_key_padding_mask=padding_mask)
"""


def test_bitwise_not_of_an_int64_mask_is_never_zero() -> None:
    seq_mask = torch.cat([torch.tensor([[1, 0]]), torch.tensor([[1, 0]]).new_ones(1, 1)], dim=1)
    assert seq_mask.dtype == torch.int64
    assert (~seq_mask != 0).all()


def test_a_collated_mask_joined_to_ones_stays_an_int64_mask(found: Found) -> None:
    assert found(BST) == [(15, "MC518")]
    assert found(BST.replace("padding_mask = ~seq_mask", "padding_mask = seq_mask == 0")) == []


# Decision Transformer's GPT-2: the 2-D mask flattened, extended, cast and handed to the blocks,
# whose attention adds it.
DECISION = """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, scores, attention_mask=None):
        scores = scores + attention_mask
        return scores.softmax(-1)


class GPT2Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList([Attention() for _ in range(2)])

    def forward(self, inputs_embeds, attention_mask=None):
        hidden_states = inputs_embeds
        attention_mask = attention_mask.view(inputs_embeds.size(0), -1)
        attention_mask = attention_mask[:, None, None, :]
        attention_mask = attention_mask.to(dtype=hidden_states.dtype)
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask=attention_mask)
        return hidden_states
"""


def test_a_float_keep_mask_added_to_scores_masks_nothing() -> None:
    keep = torch.tensor([[1.0, 1.0, 0.0]])
    weights = (torch.zeros(1, 3) + keep).softmax(-1)
    assert weights[0, 2] > 0.1  # the padded key keeps its weight


def test_the_cast_is_reported_where_the_blocks_cannot_see_it(found: Found) -> None:
    assert found(DECISION) == [(20, "MC508")]
    fixed = DECISION.replace(
        "attention_mask = attention_mask.to(dtype=hidden_states.dtype)",
        "attention_mask = (1.0 - attention_mask.to(dtype=hidden_states.dtype)) * "
        "torch.finfo(hidden_states.dtype).min")
    assert found(fixed) == []


def test_a_mask_of_unknown_rank_made_4d_is_not_taken_for_a_tokenizers(found: Found) -> None:
    # without the flatten to (batch, seq) the rebound name may hold an additive 4-D mask
    unflattened = DECISION.replace(
        "        attention_mask = attention_mask.view(inputs_embeds.size(0), -1)\n", "")
    assert found(unflattened) == []


def test_a_cast_in_sight_of_a_use_of_its_name_is_reported_at_the_cast(found: Found) -> None:
    # the cast is the line to change (held-out 27, 41 and 63 mark it); a use that reshapes
    # the mask (`logits + keep[:, None, None, :]`) is reported at the use, as before
    direct = DECISION.replace(
        "        for block in self.h:\n"
        "            hidden_states = block(hidden_states, attention_mask=attention_mask)\n",
        "        hidden_states = (hidden_states + attention_mask).softmax(-1)\n")
    assert found(direct) == [(20, "MC508")]
    reshaped = direct.replace(
        "        attention_mask = attention_mask[:, None, None, :]\n", "").replace(
        "(hidden_states + attention_mask)", "(hidden_states + attention_mask[:, None, None, :])")
    assert found(reshaped) == [(20, "MC508")]


# DeepCTR's DIN pooling: the product inside the softmax rebinds the name it multiplies, and the
# other branch multiplies without a softmax.
DIN = """\
import torch
import torch.nn.functional as F


def pool(outputs, keys, keys_length, normalize):
    keys_masks = torch.arange(keys.size(1)).repeat(keys.size(0), 1)
    keys_masks = keys_masks < keys_length.view(-1, 1)
    keys_masks = keys_masks.unsqueeze(1).float()
    if normalize:
        outputs = F.softmax(outputs * keys_masks, dim=-1)
    else:
        outputs = outputs * keys_masks
    return torch.matmul(outputs, keys)
"""


def test_a_zeroed_logit_keeps_softmax_weight() -> None:
    weights = (torch.tensor([[2.0, 1.0, 5.0]]) * torch.tensor([[1.0, 1.0, 0.0]])).softmax(-1)
    assert weights[0, 2] > 0.03  # the masked position still gets exp(0)


def test_a_product_inside_the_softmax_is_not_its_remasking(found: Found) -> None:
    assert found(DIN) == [(10, "MC520")]
    fixed = DIN.replace("F.softmax(outputs * keys_masks, dim=-1)",
                        "F.softmax(outputs.masked_fill(keys_masks == 0, float('-inf')), dim=-1)")
    assert found(fixed) == []
    # a renormalisation after the softmax, in the same branch, still clears it
    renormalised = DIN.replace("        outputs = F.softmax(outputs * keys_masks, dim=-1)\n",
                               "        outputs = F.softmax(outputs * keys_masks, dim=-1)\n"
                               "        outputs = outputs * keys_masks\n")
    assert found(renormalised) == []


# FT-Transformer: missing values as a bool mask joined from isnan and a comparison, added.
FT = """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, scores, key_padding_mask=None):
        if key_padding_mask is not None:
            scores = scores + key_padding_mask[:, None, None, :]
        return scores.softmax(-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, scores, x_num, x_cat):
        missing = torch.cat([torch.isnan(x_num), x_cat < 0], dim=1)
        return self.attn(scores, key_padding_mask=missing)
"""


def test_isnan_and_a_joined_comparison_are_bool() -> None:
    joined = torch.cat([torch.isnan(torch.tensor([[1.0, float("nan")]])),
                        torch.tensor([[3, -1]]) < 0], dim=1)
    assert joined.dtype == torch.bool


def test_a_joined_missing_value_mask_added_to_scores_is_found(found: Found) -> None:
    assert found(FT) == [(8, "MC509")]
    fixed = FT.replace("scores = scores + key_padding_mask[:, None, None, :]",
                       "scores = scores.masked_fill(key_padding_mask[:, None, None, :], "
                       "float('-inf'))")
    assert found(fixed) == []


# PatchTST: a key padding mask (batch, seq) unsqueezed onto the query axis.
PATCHTST = """\
import torch
import torch.nn.functional as F


def attend(attn_scores, key_padding_mask=None):
    if key_padding_mask is not None:
        attn_scores = attn_scores.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(3),
                                              float("-inf"))
    return F.softmax(attn_scores, dim=-1)
"""


def test_a_key_padding_mask_on_the_query_axis_hides_rows() -> None:
    pad = torch.tensor([[False, False, True]])
    filled = torch.zeros(1, 1, 3, 3).masked_fill(pad.unsqueeze(1).unsqueeze(3), float("-inf"))
    assert torch.isnan(filled.softmax(-1)[0, 0, 2]).all()  # the padded query row is empty
    assert not torch.isinf(filled[0, 0, 0]).any()  # and the padded key is still visible


def test_the_parameters_name_gives_its_layout(found: Found) -> None:
    assert found(PATCHTST) == [(7, "MC514")]
    fixed = PATCHTST.replace("unsqueeze(1).unsqueeze(3)", "unsqueeze(1).unsqueeze(2)")
    assert found(fixed) == []
    # another mask's name: the softmax over the last axis says the third is the queries'
    other = PATCHTST.replace("key_padding_mask", "frame_mask")
    assert found(other) == [(7, "MC514")]
    # scores laid out keys first, softmaxed over dim=-2: the third axis is the keys'
    assert found(other.replace("dim=-1", "dim=-2")) == []


# Perceiver: a real-point mask under its Hugging Face name, defaulting to all True, handed to
# MultiheadAttention as the key padding mask.
PERCEIVER = """\
import torch
from torch import nn


class Cross(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, latents, inputs, attention_mask=None):
        out, _ = self.attn(latents, inputs, inputs, key_padding_mask=attention_mask)
        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cross = Cross()

    def forward(self, latents, points, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones(points.shape[:2], dtype=torch.bool)
        return self.cross(latents, points, attention_mask)
"""


def test_a_bool_default_leaves_the_names_convention(found: Found) -> None:
    assert found(PERCEIVER) == [(11, "MC502")]
    fixed = PERCEIVER.replace("key_padding_mask=attention_mask)",
                              "key_padding_mask=~attention_mask)")
    assert found(fixed) == []


# SASRec: the causal triangle combined with the padding before it reaches the attention.
SASREC = """\
import torch
from torch import nn


class SASRec(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)

    def forward(self, seqs, log_seqs):
        timeline_mask = log_seqs == 0
        tl = seqs.shape[0]
        attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.bool))
        blocked = attention_mask.unsqueeze(0) | timeline_mask.unsqueeze(1)
        blocked = blocked & ~torch.eye(tl, dtype=torch.bool)
        blocked = blocked.repeat_interleave(2, dim=0)
        out, _ = self.attn(seqs, seqs, seqs, attn_mask=blocked)
        return out
"""


def test_a_triangle_combined_into_another_mask_is_reported_where_it_is_made(
        found: Found) -> None:
    assert found(SASREC) == [(13, "MC521")]
    fixed = SASREC.replace("attention_mask = torch.tril(", "attention_mask = ~torch.tril(")
    assert found(fixed) == []
