"""MC514: a (batch, seq) padding mask laid out as (batch, 1, seq, 1) (hyunwoongko/transformer
PR #40, bentrevett/pytorch-seq2seq#96), and what `self.method(...)` gives when the method is
defined below its call. Each bad source next to the findings it must give, its correct form
next to none, and the torch 2.13 fact the rule rests on (CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


def _fill(mask: torch.Tensor) -> torch.Tensor:
    scores = torch.zeros(1, 1, 4, 4)
    return scores.masked_fill(mask == 0, -10000.0).softmax(-1)


def test_the_query_axis_layout_leaves_the_padding_keys_visible() -> None:
    src = torch.tensor([[5, 7, 0, 0]])
    rows = _fill((src != 0).unsqueeze(1).unsqueeze(3))
    assert rows[0, 0, 0, 3] == pytest.approx(0.25)  # a real query weighs a padding key
    assert torch.allclose(rows[0, 0, 2], torch.full((4,), 0.25))  # padded query rows uniform
    keys = _fill((src != 0).unsqueeze(1).unsqueeze(2))
    assert keys[0, 0, 0, 3] == 0  # on the key axis the padding keys get no weight
    rows_inf = torch.zeros(1, 1, 4, 4).masked_fill(
        (src == 0).unsqueeze(1).unsqueeze(3), float("-inf")).softmax(-1)
    assert torch.isnan(rows_inf[0, 0, 2]).all()  # with -inf the padded query rows are NaN


def test_sdpa_with_the_query_axis_mask_lets_real_queries_see_padding() -> None:
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 4, 8)
    src = torch.tensor([[5, 7, 0, 0]])
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=(src != 0)[:, None, :, None])
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=(src != 0)[:, None, None, :])
    unmasked = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(wrong[0, 0, 0], unmasked[0, 0, 0])  # query 0 sees all four keys
    assert not torch.allclose(right[0, 0, 0], unmasked[0, 0, 0])


# The shape of hyunwoongko/transformer before PR #40: `make_src_mask` defined below `forward`,
# the mask handed down two modules to the attention that fills.
MODEL = '''import math
from torch import nn


class ScaleDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        score = q @ k.transpose(2, 3) / math.sqrt(k.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        return score.softmax(-1) @ v


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = ScaleDotProductAttention()

    def forward(self, x, src_mask):
        return self.attention(x, x, x, mask=src_mask)


class Transformer(nn.Module):
    def __init__(self, src_pad_idx):
        super().__init__()
        self.src_pad_idx = src_pad_idx
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(2)])

    def forward(self, src, x):
        src_mask = self.make_src_mask(src)
        for layer in self.layers:
            x = layer(x, src_mask)
        return x

    def make_src_mask(self, src):
        return (src != self.src_pad_idx).unsqueeze(1).unsqueeze(3)
'''


def test_reported_where_the_mask_is_made(found: Found) -> None:
    assert found(MODEL) == [(35, "MC514")]


def test_the_key_axis_mask_is_silent(found: Found) -> None:
    assert found(MODEL.replace("unsqueeze(3)", "unsqueeze(2)")) == []


def test_a_mask_turned_onto_the_key_axis_is_silent(found: Found) -> None:
    assert found(MODEL.replace("unsqueeze(1).unsqueeze(3)",
                               "unsqueeze(1).unsqueeze(3).transpose(2, 3)")) == []


def test_a_fill_of_features_is_silent(found: Found) -> None:
    # (B, C, T, F) features masked by time before a max over time take (B, 1, T, 1) on purpose
    assert found(MODEL.replace("score", "feat").replace("return feat.softmax(-1) @ v",
                                                        "return feat.amax(dim=2)")) == []


@pytest.mark.parametrize("spelling", [
    "(src != pad)[:, None, :, None]",
    "(src != pad).unsqueeze(-1).unsqueeze(1)",
    "(src != pad).unsqueeze(1).unsqueeze(-1)",
    "(src != pad)[:, None, :].unsqueeze(-1)",
    "(src != pad)[:, None][..., None]",
])
def test_each_spelling_of_the_query_axis(found: Found, spelling: str) -> None:
    source = ("import torch\n\n\ndef f(src, pad, scores):\n"
              f"    m = {spelling}\n"
              "    return scores.masked_fill(m == 0, float('-inf')).softmax(-1)\n")
    assert found(source) == [(5, "MC514")]


@pytest.mark.parametrize("spelling", [
    "(src != pad)[:, None, None, :]",
    "(src != pad).unsqueeze(1).unsqueeze(2)",
    "(src != pad).unsqueeze(-2).unsqueeze(1)",
    "(src != pad)[:, None, :, None].view(b, 1, 1, -1)",
    "(src.unsqueeze(1) != pad).unsqueeze(3)",
    "(src != pad)[:, 0, None, None]",
])
def test_each_spelling_of_the_key_axis_or_unknown(found: Found, spelling: str) -> None:
    source = ("import torch\n\n\ndef f(src, pad, scores, b):\n"
              f"    m = {spelling}\n"
              "    return scores.masked_fill(m == 0, float('-inf')).softmax(-1)\n")
    assert found(source) == []


# A method called above its definition gives what its returns give, as a method defined above
# does: here a bool tensor, which added to the scores masks nothing (MC509).
BELOW = '''import torch
from torch import nn


class Scorer(nn.Module):
    def forward(self, scores, ids):
        keep = self.keep_mask(ids)
        return (scores + keep).softmax(-1)

    def keep_mask(self, ids):
        return ids != 0
'''


def test_a_method_below_its_call_gives_its_returns(found: Found) -> None:
    assert found(BELOW) == [(8, "MC509")]


def test_as_a_method_above_its_call_does(found: Found) -> None:
    method = "    def keep_mask(self, ids):\n        return ids != 0\n"
    above = BELOW.replace("\n" + method, "").replace(
        "class Scorer(nn.Module):\n", "class Scorer(nn.Module):\n" + method + "\n")
    assert found(above) == [(11, "MC509")]


def test_a_bool_added_to_scores_masks_nothing() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[True, True, False]])
    assert (scores + keep).softmax(-1)[0, 2] > 0.1  # the padding keeps its weight


# One parameter read both ways in one class: the flash path hands it to SDPA as a keep-mask
# (AND-ed with the causal keep triangle), the einsum path fills where it is True
# (lucidrains/x-transformers#240: what True means in `mask`).
ATTEND = '''import torch
import torch.nn.functional as F
from torch import nn


class Attend(nn.Module):
    def flash_attn(self, q, k, v, mask=None):
        if mask is not None:
            mask = mask[:, None, None, :]
        if mask is not None and self.causal:
            mask = mask & ~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def forward(self, q, k, v, mask=None):
        if self.flash:
            return self.flash_attn(q, k, v, mask=mask)
        sim = q @ k.transpose(-1, -2)
        if mask is not None:
            mask = mask[:, None, None, :]
            sim = sim.masked_fill(mask, -torch.finfo(sim.dtype).max)
        return sim.softmax(-1) @ v
'''


def test_a_mask_filled_where_the_other_path_keeps_it(found: Found) -> None:
    assert found(ATTEND) == [(20, "MC519")]


def test_both_paths_reading_it_as_a_keep_mask_are_silent(found: Found) -> None:
    assert found(ATTEND.replace("masked_fill(mask,", "masked_fill(~mask,")) == []


def test_a_flash_path_that_ors_in_the_causal_triangle_is_the_wrong_one(found: Found) -> None:
    # x-transformers#160: OR-ing the causal triangle (True = hidden) in says the author reads
    # the mask as True = hidden; the fill is right and the SDPA call is reported (MC511)
    ored = ATTEND.replace("mask = mask & ~torch.ones", "mask = mask | torch.ones")
    assert found(ored) == [(12, "MC511")]


def test_both_paths_agree_on_the_two_directions() -> None:
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 3, 4)
    keep = torch.tensor([[True, True, False]])
    flash = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
    sim = (q @ k.transpose(-1, -2)).masked_fill(~keep[:, None, None, :], float("-inf"))
    assert torch.allclose(flash, (sim * q.shape[-1] ** -0.5).softmax(-1) @ v, atol=1e-6)
    wrong = (q @ k.transpose(-1, -2)).masked_fill(keep[:, None, None, :], float("-inf"))
    assert not torch.allclose(flash, (wrong * q.shape[-1] ** -0.5).softmax(-1) @ v)


PADDING = '''import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x, scores, pad):
        if self.fused:
            return self.mha(x, x, x, key_padding_mask=pad)[0]
        scores = scores.masked_fill(pad[:, None, None, :] == 0, float("-inf"))
        return scores.softmax(-1)
'''


def test_a_padding_mask_filled_where_it_is_zero(found: Found) -> None:
    assert found(PADDING) == [(13, "MC511")]


def test_a_padding_mask_filled_where_it_is_true_is_silent(found: Found) -> None:
    assert found(PADDING.replace("pad[:, None, None, :] == 0", "pad[:, None, None, :]")) == []


# A layer given to a constructor (x-transformers' `TransformerWrapper(attn_layers=Encoder(...))`)
# is read as the instance every construction in the file passes.
INJECTED = '''import torch
from torch import nn


class Attn(nn.Module):
    def forward(self, scores, mask=None):
        return scores.masked_fill(mask, float("-inf")).softmax(-1)


class Wrapper(nn.Module):
    def __init__(self, layer, pad_id=0):
        super().__init__()
        self.layer = layer
        self.pad_id = pad_id

    def forward(self, x, scores):
        mask = x != self.pad_id
        return self.layer(scores, mask=mask)


model = Wrapper(layer=Attn())
'''


def test_a_layer_given_to_the_constructor_is_followed(found: Found) -> None:
    # every call hands Attn a keep-mask: reported at its fill, as for a helper (MC519)
    assert found(INJECTED) == [(7, "MC519")]


def test_the_padding_mask_given_to_it_is_silent(found: Found) -> None:
    assert found(INJECTED.replace("mask = x != self.pad_id", "mask = x == self.pad_id")) == []


def test_two_constructions_with_other_layers_are_not_followed(found: Found) -> None:
    # `Wrapper(layer=Attn())` and `Wrapper(layer=nn.Identity())`: no one class to read
    assert found(INJECTED + "other = Wrapper(layer=nn.Identity())\n") == []


def test_a_dtype_tested_mask_takes_the_modules_convention_on_purpose(found: Found) -> None:
    # neuralforecast's PatchTST: `if attn_mask.dtype == torch.bool: masked_fill_(attn_mask, ...)
    # else: scores += attn_mask` beside an SDPA branch; its callers pass no mask
    tested = ATTEND.replace(
        "        if mask is not None:\n            mask = mask[:, None, None, :]\n"
        "            sim = sim.masked_fill(",
        "        if mask is not None and mask.dtype == torch.bool:\n"
        "            mask = mask[:, None, None, :]\n            sim = sim.masked_fill(")
    assert tested != ATTEND
    assert found(tested) == []


# Held-out 21's token-pruned ViT: the padding mask of the kept tokens (`arange(w)[None, :] >
# n_kept[:, None]`, True past each row's count) handed to blocks that give SDPA their `pad`.
PRUNED = '''import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def forward(self, q, k, v, pad=None):
        if pad is None:
            return F.scaled_dot_product_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])


def prune(x, n_kept):
    width = int(n_kept.max())
    pad = torch.arange(width, device=x.device)[None, :] >= n_kept[:, None]
    return x[:, :width], pad


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = Block(), Block()

    def forward(self, q, k, v, x, n_kept):
        q = self.first(q, k, v)
        x, pad = prune(x, n_kept)
        return self.second(q, k, v, pad)
'''


def test_a_padding_mask_given_to_sdpa_through_a_parameter_named_pad(found: Found) -> None:
    assert found(PRUNED) == [(10, "MC511")]


def test_its_complement_is_silent(found: Found) -> None:
    assert found(PRUNED.replace(">= n_kept[:, None]", "< n_kept[:, None]")) == []


def test_a_neutral_name_is_reported_at_the_call(found: Found) -> None:
    renamed = PRUNED.replace("pad=None", "m=None").replace("if pad is None", "if m is None")
    renamed = renamed.replace("attn_mask=pad[", "attn_mask=m[")
    assert found(renamed) == [(27, "MC511")]


def test_positions_past_a_count_are_padding() -> None:
    n_kept = torch.tensor([2, 3])
    pad = torch.arange(3)[None, :] >= n_kept[:, None]
    assert pad.tolist() == [[False, False, True], [False, False, False]]


# Held-out 21's MSA row attention: a parameter named attention_mask, reshaped, as
# key_padding_mask (MC502 at the module call, not only when it is passed untouched).
def test_a_reshaped_hf_mask_as_key_padding_mask(found: Found) -> None:
    source = ("import torch\nfrom torch import nn\n\n\nclass Row(nn.Module):\n"
              "    def __init__(self, d):\n        super().__init__()\n"
              "        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)\n\n"
              "    def forward(self, x, attention_mask):\n        b, r, c, d = x.shape\n"
              "        h = x.reshape(b * r, c, d)\n"
              "        return self.attn(h, h, h,\n"
              "                         key_padding_mask=attention_mask.reshape(b * r, c))\n")
    assert found(source) == [(14, "MC502")]
    assert found(source.replace("attention_mask.reshape", "(attention_mask == 0).reshape")) == []


# Held-out 22's shapes: a helper's `-torch.finfo(t.dtype).max` as the fill (x-transformers'
# max_neg_value), a partial of SDPA returned with its mask bound, and a file that autocasts its
# model to float16 elsewhere.
NEG = '''import torch
from torch import nn


def max_neg_value(t):
    return -torch.finfo(t.dtype).max


class Attention(nn.Module):
    def forward(self, sim, attention_mask=None):
        mask = attention_mask[:, None, None, :].bool()
        return sim.masked_fill(mask, max_neg_value(sim)).softmax(-1)


def run(model, tokenizer, sim):
    enc = tokenizer(["a b", "c"], return_tensors="pt", padding=True)
    return model(sim, attention_mask=enc["attention_mask"])
'''


def test_a_helpers_finfo_fill_is_a_masking_fill(found: Found) -> None:
    assert found(NEG) == [(12, "MC519")]
    assert found(NEG.replace("masked_fill(mask,", "masked_fill(~mask,")) == []


PARTIAL = '''from functools import partial

import torch.nn.functional as F


def build(ids, pad_id):
    keep = ids != pad_id
    return partial(F.scaled_dot_product_attention, attn_mask=keep[:, None, None, :].float())
'''


def test_a_mask_bound_into_a_returned_partial(found: Found) -> None:
    assert found(PARTIAL) == [(8, "MC508")]
    assert found(PARTIAL.replace(".float()", "")) == []


def test_a_partial_called_in_sight_gives_one_finding(found: Found) -> None:
    called = PARTIAL.replace("    return partial(", "    attend = partial(") + (
        "    return attend(ids, ids, ids)\n")
    assert found(called) == [(8, "MC508")]


AMP = '''import torch


def attend(q, k, v, pad):
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(pad[:, None, None, :], torch.finfo(torch.float32).min)
    return scores.softmax(-1) @ v


def step(model, batch):
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        return model(batch)
'''


def test_a_file_that_autocasts_to_float16_may_fill_half_scores(found: Found) -> None:
    assert found(AMP) == [(6, "MC517")]
    assert found(AMP.replace("dtype=torch.float16", "dtype=torch.float32")) == []
    assert found(AMP.replace("dtype=torch.float16", "dtype=torch.float16, enabled=False")) == []


def test_the_float32_minimum_raises_on_a_half_tensor() -> None:
    scores = torch.zeros(2, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(torch.tensor([True, False]), torch.finfo(torch.float32).min)
