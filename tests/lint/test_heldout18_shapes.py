"""Real code shapes behind misses of held-out 16 to 19 (bugs written in the house style of
well-known code bases, and in widely copied teaching code), fixed in session 13: each bad source
next to the findings it must give, its correct form next to none, and the torch 2.13 fact each
rests on (CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# A small helper is read at its call with the caller's arguments (Hugging Face BERT's
# get_extended_attention_mask, which casts the 0/1 mask it is given to the model's dtype).
EXTENDED = '''import torch
from torch import nn


class Model(nn.Module):
    def get_extended_attention_mask(self, attention_mask, dtype):
        extended = attention_mask[:, None, None, :]
        extended = extended.to(dtype=dtype)
        return extended

    def forward(self, scores, attention_mask):
        extended = self.get_extended_attention_mask(attention_mask, self.dtype)
        return (scores + extended).softmax(-1)
'''


def test_a_helper_is_read_with_the_callers_arguments(found: Found) -> None:
    assert found(EXTENDED) == [(8, "MC508")]  # at the cast the helper makes


def test_the_helper_that_makes_the_bias_is_silent(found: Found) -> None:
    fixed = EXTENDED.replace("        return extended\n", "        return (1.0 - extended) * "
                             "torch.finfo(dtype).min\n")
    assert found(fixed) == []


def test_a_zero_one_mask_added_to_scores_masks_nothing() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[1.0, 1.0, 0.0]])
    assert (scores + keep).softmax(-1)[0, 2] > 0.1  # the padding keeps its weight


# ESPnet's subsampling returns `(x, mask[:, :, :-2:2])`: the tuple of a module of the file is
# read with its arguments, and the bool mask reaches `1 - mask` three calls down.
SUBSAMPLED = '''import torch
from torch import nn


class Subsampling(nn.Module):
    def forward(self, x, x_mask):
        b, t = x.shape[:2]
        return x, x_mask[:, :, :-2:2]


class Attention(nn.Module):
    def forward(self, scores, mask):
        mask = (1 - mask.unsqueeze(1)).bool()
        return scores.masked_fill(mask, -1e4)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = Subsampling()
        self.att = Attention()

    def forward(self, xs, lengths):
        masks = (torch.arange(10)[None, :] < lengths[:, None])[:, None, :]
        xs, masks = self.embed(xs, masks)
        return self.att(xs, masks)
'''


def test_a_tuple_returned_by_a_module_of_the_file_carries_the_bool_mask(found: Found) -> None:
    assert found(SUBSAMPLED) == [(13, "MC512")]


def test_the_inverted_bool_mask_is_silent(found: Found) -> None:
    assert found(SUBSAMPLED.replace("(1 - mask.unsqueeze(1)).bool()", "~mask.unsqueeze(1)")) == []


def test_bool_subtraction_raises() -> None:
    with pytest.raises(RuntimeError, match="Subtraction"):
        _ = 1 - torch.tensor([True, False])


# An in-place fill of softmax's own output (ESPnet's forward_attention written with
# masked_fill_): softmax's backward reads its output, so backward raises.
SOFTMAX_INPLACE = '''import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, scores, mask):
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1).masked_fill_(mask, 0.0)
'''


def test_an_inplace_fill_of_the_softmax_output_is_found(found: Found) -> None:
    assert found(SOFTMAX_INPLACE) == [(8, "MC505")]


def test_the_out_of_place_fill_is_silent(found: Found) -> None:
    assert found(SOFTMAX_INPLACE.replace("masked_fill_(mask, 0.0)", "masked_fill(mask, 0.0)")) == []


def test_the_inplace_fill_under_no_grad_is_silent(found: Found) -> None:
    under = SOFTMAX_INPLACE.replace("    def forward", "    @torch.no_grad()\n    def forward")
    assert found(under) == []


def test_softmax_backward_refuses_its_output_filled_in_place() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    y = torch.softmax(x, dim=-1).masked_fill_(torch.tensor([[True, False, False]] * 2), 0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# OpenNMT's GlobalAttention: `align * mask` goes into softmax through a `.view(...)`.
VIEWED = '''import torch
import torch.nn.functional as F


def attend(align, lengths, batch, source_l):
    mask = torch.arange(source_l)[None, :] < lengths[:, None]
    mask = mask.unsqueeze(1)
    align = align * mask
    return F.softmax(align.view(batch, source_l), -1)
'''


def test_a_product_reshaped_into_softmax_is_found(found: Found) -> None:
    assert found(VIEWED) == [(8, "MC520")]


def test_the_filled_logits_reshaped_into_softmax_are_silent(found: Found) -> None:
    assert found(VIEWED.replace("align * mask", "align.masked_fill(~mask, float('-inf'))")) == []


# sentence-transformers: the file's own tokenize builds `attention_mask` as int64 and a module
# inverts it with `~` on the way to `src_key_padding_mask`.
FEATURES = '''import torch
from torch import nn


def tokenize(ids, max_len):
    mask = torch.tensor([[1] * len(x) + [0] * (max_len - len(x)) for x in ids], dtype=torch.long)
    return {"attention_mask": mask}


class Context(nn.Module):
    def forward(self, features):
        return ~features["attention_mask"]
'''


def test_inverting_the_int64_mask_of_the_files_own_batch_is_found(found: Found) -> None:
    assert found(FEATURES) == [(12, "MC518")]


def test_comparing_it_with_zero_is_silent(found: Found) -> None:
    assert found(FEATURES.replace('~features["attention_mask"]',
                                  'features["attention_mask"] == 0')) == []


def test_bitwise_not_of_an_int_mask_is_all_true() -> None:
    assert bool((~torch.tensor([1, 0])).bool().all())


# timm: `self.norm1, self.attn = nn.LayerNorm(d), Attention(d)` (one line binds both), and an
# Attention that hands the mask to SDPA on its fused path and adds it on the eager one.
TIMM = '''import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.fused_attn = False

    def forward(self, q, attn_mask=None):
        if self.fused_attn:
            return F.scaled_dot_product_attention(q, q, q, attn_mask=attn_mask)
        attn = q @ q.transpose(-2, -1)
        if attn_mask is not None:
            attn = attn + attn_mask
        return attn.softmax(dim=-1) @ q


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention()

    def forward(self, x, attn_mask=None):
        return x + self.attn(self.norm1(x), attn_mask=attn_mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(8) for _ in range(2)])

    def forward(self, x, patch_valid):
        patch_valid = patch_valid.bool()
        attn_mask = patch_valid.new_ones((2, 1), dtype=torch.bool)
        attn_mask = torch.cat([attn_mask, patch_valid], dim=1)[:, None, None, :]
        for blk in self.blocks:
            x = blk(x, attn_mask=attn_mask)
        return x
'''


def test_a_bool_mask_added_on_the_eager_path_is_found_where_it_is_added(found: Found) -> None:
    assert found(TIMM) == [(16, "MC509")]


def test_the_additive_mask_is_silent(found: Found) -> None:
    fixed = TIMM.replace("[:, None, None, :]\n", "[:, None, None, :]\n        attn_mask = "
                         "torch.zeros(attn_mask.shape).masked_fill(~attn_mask, float('-inf'))\n")
    assert found(fixed) == []


def test_a_bool_mask_added_to_scores_adds_one() -> None:
    scores = torch.zeros(1, 2)
    assert torch.equal(scores + torch.tensor([[True, False]]), torch.tensor([[1.0, 0.0]]))


# vLLM's SDPA backend: keys gathered from the paged cache and moved to heads-first layout keep
# the cached positions (L != S on a prefill with cached context).
PAGED = '''import torch
from torch.nn.functional import scaled_dot_product_attention


def gather(cache, table, n):
    return cache[table].flatten(0, 1)[:n]


def attend(q, kv_cache, table, n):
    key_cache, value_cache = kv_cache
    k = gather(key_cache, table, n).movedim(0, 1)
    v = gather(value_cache, table, n).movedim(0, 1)
    return scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)
'''


def test_keys_gathered_from_a_cache_and_moved_are_cached(found: Found) -> None:
    assert found(PAGED) == [(13, "MC510")]


def test_the_fresh_keys_are_silent(found: Found) -> None:
    fresh = PAGED.replace("gather(key_cache, table, n)", "q").replace(
        "gather(value_cache, table, n)", "q")
    assert found(fresh) == []


# x-transformers' Attend: `mask = mask[:, None, None, :]` rebinds the parameter to a reshape of
# itself, which is still the caller's keep-mask when it becomes the fill condition.
RESHAPED = '''import torch
from torch import nn


class Attend(nn.Module):
    def forward(self, sim, mask=None):
        if mask is not None:
            mask = mask[:, None, None, :]
            sim = sim.masked_fill(mask, -torch.finfo(sim.dtype).max)
        return sim.softmax(dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attend = Attend()

    def forward(self, sim, tokens):
        keep = tokens != 0
        return self.attend(sim, mask=keep)
'''


def test_a_parameter_reshaped_in_place_keeps_its_role(found: Found) -> None:
    # every call hands the keep-mask in: reported at the fill, where the fix goes
    assert found(RESHAPED) == [(9, "MC519")]
    mixed = RESHAPED.replace("        return self.attend(sim, mask=keep)\n",
                             "        sim = self.attend(sim, mask=~keep)\n"
                             "        return self.attend(sim, mask=keep)\n")
    assert found(mixed) == [(21, "MC519")]  # ... else at the call that hands it in


def test_the_inverted_fill_condition_is_silent(found: Found) -> None:
    assert found(RESHAPED.replace("sim.masked_fill(mask,", "sim.masked_fill(~mask,")) == []


def test_a_parameter_rebound_to_other_values_is_not_the_callers(found: Found) -> None:
    rebound = RESHAPED.replace("mask = mask[:, None, None, :]",
                               "mask = mask[:, None, None, :] == 0")
    assert found(rebound) == []


# The argument is named like a local of the helper: it is read in the caller's scope.
COLLIDING = '''import torch


def as_mask(m):
    x = m.float()
    return x


def attend(scores, lengths):
    x = torch.arange(4)[None, :] < lengths[:, None]
    return (scores + as_mask(x)).softmax(-1)
'''


def test_an_argument_named_like_a_local_of_the_helper_is_the_callers(found: Found) -> None:
    assert found(COLLIDING) == [(5, "MC508")]  # at the cast of the caller's mask


def test_the_helper_that_returns_a_bias_of_it_is_silent(found: Found) -> None:
    assert found(COLLIDING.replace("    return x\n", "    return (1.0 - x) * -10000.0\n")) == []


def test_an_inplace_fill_of_an_output_used_only_detached_is_silent(found: Found) -> None:
    detached = '''import torch
from torch import nn


class Guide(nn.Module):
    def forward(self, lprobs, lprobs_teacher, pad):
        probs_teacher = lprobs_teacher.exp().masked_fill_(pad, 0)
        probs_teacher = probs_teacher.detach()
        return -(probs_teacher * lprobs).sum()
'''
    assert found(detached) == []


def test_backward_never_reads_a_detached_output_filled_in_place() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    lprobs = torch.log_softmax(x, -1)
    teacher = lprobs.exp().masked_fill_(torch.tensor([[True, False, False]] * 4), 0).detach()
    (-(teacher * lprobs).sum()).backward()  # no error: exp's saved output is off the graph
    assert x.grad is not None


# fast-transformers' exact top-k attention: the scores plus a 0/-inf top-k mask, then a
# temperature: the masked scores scaled, not a mask multiplied in.
TOPK = '''import torch


def attend(queries, keys, values, softmax_temp, topk):
    QK = torch.einsum("nlhe,nshe->nhls", queries, keys)
    _, idx = torch.topk(QK, topk, dim=-1)
    mask = QK.new_ones(QK.shape) * float("-inf")
    mask.scatter_(-1, idx, 0.0)
    QK = QK + mask
    A = torch.softmax(softmax_temp * QK, dim=-1)
    return torch.einsum("nhls,nshd->nlhd", A, values)
'''


def test_scores_at_a_temperature_are_not_a_mask_multiplied_in(found: Found) -> None:
    assert found(TOPK) == []


def test_a_positive_temperature_keeps_minus_inf_masked() -> None:
    qk = torch.tensor([[0.5, float("-inf")]])
    assert torch.softmax(0.125 * qk, dim=-1)[0, 1] == 0


# adapters' copy of transformers 4.x DeBERTa: the scores are filled where `~mask`, and a
# leftover `probs.masked_fill(mask, 0)` is thrown away. The mask is applied; the dead line would
# zero the kept weights if it were assigned, so "assign the result" would be wrong advice.
DEBERTA = '''import torch


def attend(scores, attention_mask):
    attention_mask = attention_mask.bool()
    scores = scores.masked_fill(~(attention_mask), torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1)
    probs.masked_fill(attention_mask, 0)
    return probs
'''


def test_a_dropped_fill_of_the_kept_positions_after_the_mask_is_applied_is_silent(
        found: Found) -> None:
    assert found(DEBERTA) == []


def test_a_dropped_fill_of_the_masked_positions_is_found(found: Found) -> None:
    dropped = DEBERTA.replace("    scores = scores.masked_fill(~(attention_mask), "
                              "torch.finfo(scores.dtype).min)\n", "")
    assert found(dropped) == [(7, "MC525")]


def test_an_inplace_fill_of_an_output_used_before_it_is_detached_is_found(found: Found) -> None:
    kept = '''import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, scores, mask, value):
        attn = torch.softmax(scores, dim=-1)
        attn.masked_fill_(mask == 0, 0.0)
        attn = self.dropout(attn)
        self.attn = attn.detach()
        return attn @ value
'''
    assert found(kept) == [(8, "MC505")]


# Held-out 19, a pointer-network homework: the still-available mask is a bool tensor written
# with `scatter`, OR-ed with a comparison, and inverted with `1 - allowed`.
POINTER = '''import torch


def decode(logits, lengths, n, idx):
    real = torch.arange(n)[None, :] < lengths[:, None]
    available = real.clone()
    for t in range(n):
        done = (lengths <= t)[:, None]
        allowed = available | done
        logits = logits.masked_fill(1 - allowed, float("-inf"))
        available = available.scatter(1, idx.unsqueeze(1), False)
    return logits
'''


def test_a_bool_mask_written_with_scatter_and_or_ed_with_a_comparison_stays_bool(
        found: Found) -> None:
    assert found(POINTER) == [(10, "MC512")]


def test_its_inversion_with_tilde_is_silent(found: Found) -> None:
    assert found(POINTER.replace("1 - allowed", "~allowed")) == []


def test_scatter_into_a_bool_tensor_keeps_it_bool() -> None:
    available = torch.ones(2, 3, dtype=torch.bool).scatter(1, torch.tensor([[0], [2]]), False)
    assert available.dtype == torch.bool
    assert (available | (torch.tensor([1, 5]) <= 2)[:, None]).dtype == torch.bool


# Held-out 19, LLMs-from-scratch's KV cache moved onto SDPA: the keys hold the cache on the
# `use_cache` path only, and is_causal=True is passed on both.
CACHE_BRANCH = '''import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)

    def forward(self, queries, keys_new, values_new, use_cache=False):
        if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys_new, values_new
            else:
                self.cache_k = torch.cat([self.cache_k, keys_new], dim=2)
                self.cache_v = torch.cat([self.cache_v, values_new], dim=2)
            keys, values = self.cache_k, self.cache_v
        else:
            keys, values = keys_new, values_new
        return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
'''


def test_keys_that_hold_the_cache_on_one_branch_meet_is_causal(found: Found) -> None:
    assert found(CACHE_BRANCH) == [(22, "MC510")]


def test_keys_that_never_hold_the_cache_are_silent(found: Found) -> None:
    fresh = CACHE_BRANCH.replace("            keys, values = self.cache_k, self.cache_v\n",
                                 "            keys, values = keys_new, values_new\n")
    assert found(fresh) == []


# Held-out 20, ColBERT: `d = tokenize(passages)` is what a function returns (a dict whose
# "attention_mask" field the function builds as a 1 = real token int mask), not an instance
# of a class of the file; MaxSim then fills where that keep-mask is True.
COLBERT = '''import torch


def tokenize(ids):
    input_ids = torch.tensor(ids)
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


def maxsim(sim, d_attention_mask):
    sim = sim.masked_fill(d_attention_mask[:, None, :].bool(), float("-inf"))
    return sim.max(dim=-1).values


def score(sim, passages):
    d = tokenize(passages)
    return maxsim(sim, d["attention_mask"])
'''


def test_a_dict_field_of_a_functions_return_reaches_its_helper(found: Found) -> None:
    assert found(COLBERT) == [(10, "MC519")]


def test_the_padding_as_the_fill_condition_is_silent(found: Found) -> None:
    assert found(COLBERT.replace("d_attention_mask[:, None, :].bool()",
                                 "d_attention_mask[:, None, :] == 0")) == []


@pytest.mark.parametrize("function", ["softmax", "log_softmax", "sigmoid", "tanh", "exp", "relu"])
def test_every_output_mc505_names_is_saved_for_backward(function: str) -> None:
    # The functions MC505 names when their output is filled in place (checks._SAVES_OUTPUT):
    # each one's backward reads its own output, so the in-place fill makes backward raise.
    from maskcheck.lint.checks import _SAVES_OUTPUT

    assert function in _SAVES_OUTPUT
    x = torch.randn(2, 3, requires_grad=True)
    op = getattr(torch, function)
    y = op(x, dim=-1) if "softmax" in function else op(x)
    y.masked_fill_(torch.tensor([[True, False, False]] * 2), 0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_mc505_names_no_other_output() -> None:
    from maskcheck.lint.checks import _SAVES_OUTPUT

    assert {"softmax", "log_softmax", "sigmoid", "tanh", "exp", "relu"} == _SAVES_OUTPUT
