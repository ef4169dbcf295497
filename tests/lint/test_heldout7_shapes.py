"""Real code shapes behind the misses of the seventh held-out recall set (bugs the rules claim,
spelled the way other authors write them): each bad source next to the findings it must give,
and its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# The seed guide's `create_block_mask`, filled in place with a method comparison.
PREFIX_LM = '''import math
import torch


def prefix_lm_bias(T, prefix):
    bias = torch.zeros(T, T)
    bias[:prefix, :prefix] = 0.0
    bias.masked_fill_(bias.eq(0), -math.inf)
    return bias
'''


def test_zero_mask_filled_where_eq_zero_method_is_found(found: Found) -> None:
    assert found(PREFIX_LM) == [(8, "MC504")]


def test_full_neg_inf_mask_opened_by_zeros_is_silent(found: Found) -> None:
    fixed = PREFIX_LM.replace("torch.zeros(T, T)", "torch.full((T, T), -math.inf).triu(1)").replace(
        "    bias.masked_fill_(bias.eq(0), -math.inf)\n", "")
    assert found(fixed) == []


# A conditional expression: `pad = helper(...) if lens is not None else torch.zeros(..., bool)`.
CONDITIONAL = '''import torch


def lens_to_pad(lens, n):
    return torch.arange(n)[None, :] >= lens[:, None]


def scores_of(q, k, lens):
    b, n, _ = q.shape
    pad = lens_to_pad(lens, n) if lens is not None else torch.zeros(b, n, dtype=torch.bool)
    sim = torch.einsum("bid,bjd->bij", q, k)
    sim = sim + pad[:, None, :]
    return sim.softmax(dim=-1)
'''


def test_bool_from_either_branch_added_is_found(found: Found) -> None:
    assert found(CONDITIONAL) == [(12, "MC509")]


def test_bool_from_either_branch_filled_is_silent(found: Found) -> None:
    fixed = CONDITIONAL.replace("sim + pad[:, None, :]",
                                'sim.masked_fill(pad[:, None, :], float("-inf"))')
    assert found(fixed) == []


def test_branches_that_disagree_give_nothing(found: Found) -> None:
    # one branch bool, the other a float tensor: the sum is not known to add a bool
    source = CONDITIONAL.replace("torch.zeros(b, n, dtype=torch.bool)", "torch.zeros(b, n)")
    assert found(source) == []


# ESPnet's make_pad_mask (positions >= lengths: True at padding) handed to SDPA.
ESPNET = '''import torch
import torch.nn.functional as F


def make_pad_mask(lengths, max_len):
    seq_range = torch.arange(0, max_len, dtype=torch.int64)
    return seq_range.unsqueeze(0) >= lengths.unsqueeze(-1)


def attend(q, k, v, lens):
    pad = make_pad_mask(lens, k.size(2))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])
'''


def test_padding_from_lengths_as_sdpa_mask_is_found(found: Found) -> None:
    assert found(ESPNET) == [(12, "MC511")]


def test_keep_from_lengths_as_sdpa_mask_is_silent(found: Found) -> None:
    assert found(ESPNET.replace("attn_mask=pad[", "attn_mask=~pad[")) == []
    assert found(ESPNET.replace(">= lengths", "< lengths")) == []


def test_keep_from_lengths_as_key_padding_mask_is_found(found: Found) -> None:
    source = '''import torch

mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)


def run(x, lens):
    keep = torch.arange(x.size(1))[None, :] < lens[:, None]
    return mha(x, x, x, key_padding_mask=keep)
'''
    assert found(source) == [(8, "MC511")]
    fixed = source.replace("< lens[:, None]", ">= lens[:, None]")
    assert found(fixed) == []


def test_positions_against_a_maximum_are_not_lengths(found: Found) -> None:
    source = '''import torch


def f(scores, max_len):
    cut = torch.arange(scores.size(-1))[None, :] < max_len
    return scores.masked_fill(cut, float("-inf"))
'''
    assert found(source) == []


# ESPnet's subsequent_mask written with `.triu()` (True where attended, by its docstring) and
# ANDed with the keep-mask `~make_pad_mask(...)`.
ESPNET_TRIANGLE = '''import torch


def make_pad_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def subsequent_mask(size):
    return torch.ones(size, size, dtype=torch.bool).triu()


def tgt_keep(ys, lens):
    tgt = ~make_pad_mask(lens, ys.size(1)).unsqueeze(1)
    return tgt & subsequent_mask(ys.size(1)).unsqueeze(0)
'''


def test_upper_triangle_and_keep_from_lengths_is_found(found: Found) -> None:
    assert found(ESPNET_TRIANGLE) == [(14, "MC521")]


def test_lower_triangle_and_keep_from_lengths_is_silent(found: Found) -> None:
    assert found(ESPNET_TRIANGLE.replace(".triu()", ".tril()")) == []


# A tokenizer's mask cast to the dtype of the hidden states and given to SDPA (pytorch#103963).
HIDDEN_CAST = '''import torch
import torch.nn.functional as F


def embed_batch(model, tokenizer, texts):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    hidden = model.embed(enc.input_ids)
    q = hidden[:, None]
    bias = enc.attention_mask[:, None, None, :].to(hidden.dtype)
    return F.scaled_dot_product_attention(q, q, q, attn_mask=bias)
'''


def test_tokenizer_mask_cast_to_hidden_dtype_is_found(found: Found) -> None:
    assert found(HIDDEN_CAST) == [(9, "MC508")]  # the cast, as held-out 7 marks it


def test_tokenizer_mask_as_bool_is_silent(found: Found) -> None:
    assert found(HIDDEN_CAST.replace(".to(hidden.dtype)", ".bool()")) == []


# The seed article's model, its buffer reached through `get_buffer` or a local alias.
GET_BUFFER = '''import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.register_buffer("w", torch.ones(n, n))

    def forward(self, x):
        self.get_buffer("w").masked_fill_(torch.triu(torch.ones(3, 3), 1).bool(), float("-inf"))
        return x.mul(self.w)
'''


def test_buffer_filled_through_get_buffer_is_found(found: Found) -> None:
    assert found(GET_BUFFER) == [(11, "MC524"), (12, "MC523")]


def test_buffer_read_through_get_buffer_is_silent(found: Found) -> None:
    fixed = GET_BUFFER.replace(
        '        self.get_buffer("w").masked_fill_(torch.triu(torch.ones(3, 3), 1).bool(), '
        'float("-inf"))\n        return x.mul(self.w)',
        '        w = self.get_buffer("w").masked_fill(torch.triu(torch.ones(3, 3), 1).bool(), '
        'float("-inf"))\n        return x.add(w)')
    assert found(fixed) == []


ALIAS_BUFFER = '''import torch
from torch import nn


class Window(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("window_bias", torch.zeros(n, n), persistent=False)

    def forward_features(self, attn, pad_tokens):
        bias = self.window_bias
        bias.masked_fill_(pad_tokens[None, :], float("-inf"))
        return (attn + bias).softmax(-1)
'''


def test_buffer_filled_through_a_local_alias_is_found(found: Found) -> None:
    assert found(ALIAS_BUFFER) == [(12, "MC524")]


def test_copy_of_a_buffer_filled_is_silent(found: Found) -> None:
    assert found(ALIAS_BUFFER.replace("bias = self.window_bias\n",
                                      "bias = self.window_bias.clone()\n")) == []
    fixed = ALIAS_BUFFER.replace(
        '        bias = self.window_bias\n'
        '        bias.masked_fill_(pad_tokens[None, :], float("-inf"))',
        '        bias = self.window_bias.masked_fill(pad_tokens[None, :], float("-inf"))')
    assert found(fixed) == []


# `functools.partial` binding is_causal=True, called with an attn_mask (conventions.md 2.7).
PARTIAL = '''from functools import partial

import torch.nn.functional as F

sdpa_causal = partial(F.scaled_dot_product_attention, dropout_p=0.0, is_causal=True)


def attend(q, k, v, keep):
    return sdpa_causal(q, k, v, attn_mask=keep)
'''


def test_partial_with_causal_flag_and_a_mask_is_found(found: Found) -> None:
    assert found(PARTIAL) == [(9, "MC506")]


def test_partial_without_causal_flag_is_silent(found: Found) -> None:
    assert found(PARTIAL.replace(", is_causal=True", "")) == []
    assert found(PARTIAL.replace("attn_mask=keep", "is_causal=False, attn_mask=keep")) == []


# A layer's weight filled in place outside no_grad (the seed article's gradient warning).
WEIGHT_FILL = '''import torch
from torch import nn


def zero_unused_rows(model, unused):
    model.tok_emb.weight.masked_fill_(unused[:, None], 0.0)
'''


def test_layer_weight_filled_in_place_is_found(found: Found) -> None:
    assert found(WEIGHT_FILL) == [(6, "MC505")]


def test_layer_weight_filled_under_no_grad_is_silent(found: Found) -> None:
    fixed = WEIGHT_FILL.replace(
        "    model.tok_emb.weight.masked_fill_(unused[:, None], 0.0)",
        "    with torch.no_grad():\n"
        "        model.tok_emb.weight.masked_fill_(unused[:, None], 0.0)")
    assert found(fixed) == []
    assert found(WEIGHT_FILL.replace(".weight.masked_fill_", ".weight.data.masked_fill_")) == []


# A tokenizer's mask multiplied into pooling logits; the batch was splatted into the backbone
# first (`self.backbone(**features)`), which hands over the entries, not the dict.
SPLAT = '''import torch


class Scorer:
    def score_pairs(self, queries, docs):
        features = self.tokenizer(queries, docs, padding=True, return_tensors="pt")
        emb = self.backbone(**features).last_hidden_state
        logits = self.cls(emb).squeeze(-1) * features["attention_mask"]
        weights = logits.softmax(-1)
        return (weights.unsqueeze(-1) * emb).sum(1)
'''


def test_tokenizer_mask_times_logits_after_a_splat_is_found(found: Found) -> None:
    assert found(SPLAT) == [(8, "MC520")]


def test_tokenizer_mask_filled_after_a_splat_is_silent(found: Found) -> None:
    fixed = SPLAT.replace(' * features["attention_mask"]',
                          '.masked_fill(features["attention_mask"] == 0, float("-inf"))')
    assert found(fixed) == []


def test_dict_handed_by_name_may_be_changed(found: Found) -> None:
    # `self.prepare(features)` may rewrite the mask: the facts are stale
    source = SPLAT.replace("self.backbone(**features)", "self.backbone(features)")
    assert found(source) == []


# A 0/1 same-region matrix multiplied into the logits, reshaped under the same name, then
# softmaxed (Swin-style window attention).
RESHAPED = '''import torch


def window_attention(attn, region, heads, n):
    same = (region[:, :, None] == region[:, None, :]).float()
    nw = same.shape[0]
    attn = attn.view(-1, nw, heads, n, n) * same.unsqueeze(1).unsqueeze(0)
    attn = attn.view(-1, heads, n, n)
    return attn.softmax(dim=-1)
'''


def test_zeroed_logits_reshaped_then_softmaxed_are_found(found: Found) -> None:
    assert found(RESHAPED) == [(7, "MC520")]


def test_filled_logits_reshaped_then_softmaxed_are_silent(found: Found) -> None:
    fixed = RESHAPED.replace(" * same.unsqueeze(1).unsqueeze(0)",
                             '.masked_fill(same.unsqueeze(1).unsqueeze(0) == 0, float("-inf"))')
    assert found(fixed) == []


def test_zeroed_logits_rebound_to_something_else_are_silent(found: Found) -> None:
    source = RESHAPED.replace("attn = attn.view(-1, heads, n, n)",
                              "attn = torch.randn(2, heads, n, n)")
    assert found(source) == []


# A Flax port's `jnp.where(mask, w, big_neg)` written with a 0-d tensor of the scores' dtype.
ZERO_D_WHERE = '''import torch

BIG_NEG = -1e10


def attend(w, mask):
    w = torch.where(mask.bool(), w, torch.tensor(BIG_NEG, dtype=w.dtype))
    return w.softmax(-1)
'''


def test_a_zero_d_tensor_of_a_large_negative_in_where_is_found(found: Found) -> None:
    # torch.where rounds it to -inf in float16 without raising: reported where the file itself
    # speaks of float16 (MC501's non-raising forms)
    assert found(ZERO_D_WHERE + HALF_NOTE) == [(7, "MC501")]
    assert found(ZERO_D_WHERE) == []


HALF_NOTE = "\n# This model runs in float16 (model.half()): what makes the -inf below reachable.\n"


def test_a_zero_d_tensor_of_the_dtype_minimum_in_where_is_silent(found: Found) -> None:
    assert found(ZERO_D_WHERE.replace("torch.tensor(BIG_NEG, dtype=w.dtype)",
                                      "torch.finfo(w.dtype).min")) == []


def test_where_of_two_zero_d_tensors_is_float32_and_silent(found: Found) -> None:
    # two 0-d tensors made from Python floats: float32, where -1e10 fits
    assert found(ZERO_D_WHERE.replace("w, torch.tensor(BIG_NEG",
                                      "torch.tensor(0.0), torch.tensor(BIG_NEG")) == []


def test_a_zero_d_tensor_takes_the_other_branchs_half_dtype() -> None:
    w = torch.zeros(2, dtype=torch.float16)
    keep = torch.tensor([True, False])
    out = torch.where(keep, w, torch.tensor(-1e10))
    assert out.dtype == torch.float16 and out[1].item() == float("-inf")
