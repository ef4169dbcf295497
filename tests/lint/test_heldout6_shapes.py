"""Real code shapes behind the misses of the sixth held-out recall set (reports cited nowhere else):
each bad source next to the findings it must give, and its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# wasiahmad/context_attentive_ir#6: a static method inverts its mask parameter with `1 -`, and the
# caller hands it a bool keep-mask from a module-level helper.
STATIC_RSUB = '''import torch
import torch.nn as nn


def sequence_mask(lengths, max_len):
    return torch.arange(0, max_len).type_as(lengths).repeat(lengths.numel(), 1).lt(
        lengths.unsqueeze(1))


class Scorer(nn.Module):
    @staticmethod
    def masked_softmax(energies, valid):
        energies = energies.masked_fill(1 - valid, -float("inf"))
        return energies.softmax(dim=-1)

    def forward(self, energies, lengths):
        keep = sequence_mask(lengths, energies.size(1))
        return self.masked_softmax(energies, keep)
'''


def test_bool_mask_passed_to_a_static_method_that_subtracts_it_is_found(found: Found) -> None:
    assert found(STATIC_RSUB) == [(13, "MC512")]


def test_static_method_inverting_with_tilde_is_silent(found: Found) -> None:
    assert found(STATIC_RSUB.replace("1 - valid", "~valid")) == []


def test_integer_mask_passed_to_a_subtracting_helper_is_silent(found: Found) -> None:
    # `1 - m` of an int 0/1 mask is fine: only a bool tensor makes torch raise
    assert found(STATIC_RSUB.replace("return self.masked_softmax(energies, keep)",
                                     "return self.masked_softmax(energies, keep.long())")) == []


FUNCTION_RSUB = '''import torch


def pad_bias(valid, scores):
    return scores + (1 - valid) * -1e4


def run(ids, scores):
    return pad_bias(ids != 0, scores)
'''


def test_bool_mask_passed_to_a_function_that_subtracts_it_is_found(found: Found) -> None:
    assert found(FUNCTION_RSUB) == [(5, "MC512")]


def test_float_mask_passed_to_a_function_that_subtracts_it_is_silent(found: Found) -> None:
    assert found(FUNCTION_RSUB.replace("pad_bias(ids != 0, scores)",
                                       "pad_bias((ids != 0).float(), scores)")) == []


# pytorch/pytorch#187801: SDPA with an attn_mask and `is_causal=self.causal`, the flag set in
# __init__ from a config dataclass whose field defaults to True.
DATACLASS_FLAG = '''from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    heads: int = 8
    causal: bool = True


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.causal = cfg.causal

    def forward(self, q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=self.causal)
'''


def test_causal_flag_from_a_config_field_default_with_a_mask_is_found(found: Found) -> None:
    assert found(DATACLASS_FLAG) == [(20, "MC506")]


def test_config_field_defaulting_to_false_is_silent(found: Found) -> None:
    assert found(DATACLASS_FLAG.replace("causal: bool = True", "causal: bool = False")) == []


def test_unannotated_config_is_silent(found: Found) -> None:
    # nothing says which class `cfg` is: its field's value is unknown
    assert found(DATACLASS_FLAG.replace("cfg: Config", "cfg")) == []


def test_config_field_used_directly_is_found(found: Found) -> None:
    source = DATACLASS_FLAG.replace("self.causal = cfg.causal", "self.cfg = cfg").replace(
        "def forward(self, q, k, v, bias):", "def forward(self, q, k, v, bias, cfg: Config):"
    ).replace("is_causal=self.causal", "is_causal=cfg.causal")
    assert found(source) == [(20, "MC506")]


# tenstorrent/tt-metal#52038, Jittor PR #423: a 0/1 triangle multiplied into a full -inf matrix.
FULL_NEG_INF = '''import torch

NEG_INF = float("-inf")


def causal_bias(n):
    upper = torch.triu(torch.ones(n, n), diagonal=1)
    return torch.full((n, n), NEG_INF) * upper
'''


def test_full_neg_inf_times_zero_one_selector_is_found(found: Found) -> None:
    assert found(FULL_NEG_INF) == [(8, "MC522")]


def test_selecting_neg_inf_with_masked_fill_is_silent(found: Found) -> None:
    assert found(FULL_NEG_INF.replace("torch.full((n, n), NEG_INF) * upper",
                                      "torch.zeros(n, n).masked_fill(upper.bool(), NEG_INF)")) == []


def test_full_of_a_finite_value_times_selector_is_not_zero_times_inf(found: Found) -> None:
    assert found(FULL_NEG_INF.replace('NEG_INF = float("-inf")', "NEG_INF = -1e4")) == []


# pytorch/pytorch#136816: a bool padding mask cast to the input's dtype, given to the attention
# modules as key padding mask (a float one is added).
FLOAT_KPM = '''import torch
import torch.nn as nn


def lengths_to_padding(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


class Pool(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, 4, batch_first=True)

    def forward(self, x, pad):
        out, _ = self.mha(x, x, x, key_padding_mask=pad)
        return out


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 4, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.pool = Pool(dim)

    def forward(self, points, lengths):
        pad = lengths_to_padding(lengths, points.shape[1]).to(points.dtype)
        h = self.encoder(points, src_key_padding_mask=pad)
        return self.pool(h, pad)
'''


def test_bool_mask_cast_to_the_input_dtype_as_key_padding_mask_is_found(found: Found) -> None:
    # the second: the same float mask handed to a module of this file that passes it on
    assert found(FLOAT_KPM) == [(28, "MC508"), (29, "MC508")]


def test_bool_key_padding_mask_is_silent(found: Found) -> None:
    assert found(FLOAT_KPM.replace(".to(points.dtype)", "")) == []


def test_mask_cast_to_another_masks_dtype_is_silent(found: Found) -> None:
    # `pad_mask.dtype` may be bool: nothing says the cast makes a float
    source = FLOAT_KPM.replace("def forward(self, points, lengths):",
                               "def forward(self, points, lengths, pad_mask):").replace(
        ".to(points.dtype)", ".to(pad_mask.dtype)")
    assert found(source) == []


def test_module_that_casts_the_mask_to_bool_before_the_module_is_silent(found: Found) -> None:
    source = FLOAT_KPM.replace("key_padding_mask=pad)", "key_padding_mask=pad.bool())").replace(
        "h = self.encoder(points, src_key_padding_mask=pad)", "h = points")
    assert found(source) == []


# seal-rg/recurrent-pretraining#23: the tokenizer's mask cast to the activations' dtype and passed
# down through blocks of a ModuleList to SDPA's attn_mask.
THROUGH_BLOCKS = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def forward(self, x, mask=None):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()

    def forward(self, x, mask=None):
        return x + self.attn(x, mask=mask)


class LM(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])

    def forward(self, input_ids, attention_mask):
        x = input_ids.float()[..., None]
        m = attention_mask[:, None, None, :].to(x.dtype)
        for block in self.blocks:
            x = block(x, mask=m)
        return x
'''


def test_float_keep_mask_passed_down_to_sdpa_is_found(found: Found) -> None:
    assert found(THROUGH_BLOCKS) == [(27, "MC508")]  # at the cast, out of the blocks' sight


def test_bool_keep_mask_passed_down_to_sdpa_is_silent(found: Found) -> None:
    assert found(THROUGH_BLOCKS.replace(".to(x.dtype)", ".bool()")) == []


def test_block_that_turns_the_mask_into_a_bias_is_silent(found: Found) -> None:
    source = THROUGH_BLOCKS.replace(
        "return F.scaled_dot_product_attention(x, x, x, attn_mask=mask)",
        "bias = (1.0 - mask) * torch.finfo(x.dtype).min\n"
        "        return F.scaled_dot_product_attention(x, x, x, attn_mask=bias)")
    assert found(source) == []
