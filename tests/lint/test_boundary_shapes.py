"""Masks that cross a function, method or module boundary inside one file: built or read in one
place, handed through a wrapper's parameter, a module's forward (two calls deep), `self.attr` or a
keyword, and used wrongly in another. Each bad source next to the findings it must give, and its
correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# A tokenizer's keep-mask handed to a model whose layers pass it on, two forwards deep, to
# nn.MultiheadAttention's key_padding_mask (True = padding).
KEEP_TO_KEY_PADDING = '''import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, x, padding):
        out, _ = self.attn(x, x, x, key_padding_mask=padding)
        return out


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.layers = nn.ModuleList([Layer(d) for _ in range(2)])

    def forward(self, x, padding):
        for layer in self.layers:
            x = layer(x, padding)
        return x


def predict(model: Model, tokenizer, x, text):
    enc = tokenizer([text], return_tensors="pt", padding=True)
    padding = enc["attention_mask"].bool()
    return model(x, padding)
'''


def test_keep_mask_reaching_key_padding_two_forwards_deep_is_found(found: Found) -> None:
    assert found(KEEP_TO_KEY_PADDING) == [(29, "MC511")]


def test_padding_mask_reaching_key_padding_two_forwards_deep_is_silent(found: Found) -> None:
    fixed = KEEP_TO_KEY_PADDING.replace('enc["attention_mask"].bool()',
                                        'enc["attention_mask"] == 0')
    assert found(fixed) == []


def test_keep_mask_inverted_by_the_wrapper_is_silent(found: Found) -> None:
    fixed = KEEP_TO_KEY_PADDING.replace("x = layer(x, padding)", "x = layer(x, ~padding)")
    assert found(fixed) == []



# A fill value from an argparse default, handed through a model's __init__ into a layer's
# constructor and kept on `self` (NVIDIA/apex#1052's -1e9, configured from the command line).
ARGPARSE_FILL = '''import argparse
import torch
import torch.nn as nn


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--mask-value", type=float, default=-1e9)
    return p.parse_args()


class Attention(nn.Module):
    def __init__(self, mask_value):
        super().__init__()
        self.mask_value = mask_value

    def forward(self, q, k, pad):
        att = q @ k.transpose(-2, -1)
        att = att.masked_fill(pad, self.mask_value)
        return att.softmax(-1)


class Model(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attn = Attention(args.mask_value)


def main():
    args = get_args()
    return Model(args)
'''


def test_argparse_fill_value_kept_on_self_is_found(found: Found) -> None:
    assert found(ARGPARSE_FILL) == [(19, "MC501")]


def test_argparse_fill_value_that_fits_half_is_silent(found: Found) -> None:
    assert found(ARGPARSE_FILL.replace("default=-1e9", "default=-1e4")) == []


def test_argparse_option_without_default_is_silent(found: Found) -> None:
    assert found(ARGPARSE_FILL.replace(", default=-1e9", "")) == []


# A fill value passed by every constructor call of the file (positional or keyword).
CONSTRUCTOR_FILL = '''import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim, mask_value):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)
        self.mask_value = mask_value

    def forward(self, x, pad):
        q, k = self.qk(x).chunk(2, -1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(pad, self.mask_value)
        return scores.softmax(-1)


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.first = Attention(dim, -1e9)
        self.second = Attention(dim, mask_value=-1e9)
'''


def test_fill_value_every_constructor_call_passes_is_found(found: Found) -> None:
    assert found(CONSTRUCTOR_FILL) == [(14, "MC501")]


def test_fill_value_the_calls_disagree_on_is_silent(found: Found) -> None:
    fixed = CONSTRUCTOR_FILL.replace("mask_value=-1e9", 'mask_value=float("-inf")')
    assert found(fixed) == []


def test_fill_value_every_call_passes_as_minus_inf_is_silent(found: Found) -> None:
    fixed = CONSTRUCTOR_FILL.replace("-1e9", 'float("-inf")')
    assert found(fixed) == []


def test_fill_value_of_a_call_that_spreads_arguments_is_silent(found: Found) -> None:
    fixed = CONSTRUCTOR_FILL.replace("Attention(dim, -1e9)", "Attention(*cfg)")
    assert found(fixed) == []


# A method that adds its mask parameter to the scores, called as `self.name(...)` from forward
# with a bool padding mask.
METHOD_ADDS_MASK = '''import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def _masked_scores(self, q, k, bias):
        scores = q @ k.transpose(-2, -1)
        return scores + bias

    def forward(self, x, lengths):
        q, k = self.qk(x).chunk(2, -1)
        pad = torch.arange(x.shape[1])[None, :] >= lengths[:, None]
        scores = self._masked_scores(q, k, pad[:, None, :])
        return scores.softmax(-1)
'''


def test_bool_mask_passed_to_a_method_that_adds_it_is_found(found: Found) -> None:
    # every call passes a bool mask: reported where the method adds it
    assert found(METHOD_ADDS_MASK) == [(12, "MC509")]


def test_additive_mask_passed_to_a_method_that_adds_it_is_silent(found: Found) -> None:
    fixed = METHOD_ADDS_MASK.replace(
        "pad[:, None, :])", 'torch.zeros(pad.shape).masked_fill(pad, float("-inf"))[:, None, :])')
    assert found(fixed) == []


# The seed article's look-ahead triu (diagonal 0) kept as a buffer in __init__ and used as the
# fill condition in forward.
BUFFER_TRIU = '''import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("future", torch.ones(n, n, dtype=torch.bool).triu())

    def forward(self, q, k):
        T = q.size(-2)
        att = q @ k.transpose(-2, -1)
        att = att.masked_fill(self.future[:T, :T], float("-inf"))
        return att.softmax(-1)
'''


def test_bool_triu_buffer_used_as_fill_condition_is_found(found: Found) -> None:
    assert found(BUFFER_TRIU) == [(8, "MC503")]


def test_strict_bool_triu_buffer_is_silent(found: Found) -> None:
    assert found(BUFFER_TRIU.replace(".triu())", ".triu(1))")) == []


def test_bool_triu_attribute_used_as_fill_condition_is_found(found: Found) -> None:
    bad = BUFFER_TRIU.replace('self.register_buffer("future", torch.ones(n, n, dtype=torch.bool)'
                              '.triu())', "self.future = torch.ones(n, n, dtype=torch.bool).triu()")
    assert found(bad) == [(8, "MC503")]


def test_bool_triu_buffer_filled_with_zero_is_silent(found: Found) -> None:
    # chunked linear attention zeroes its upper triangle on purpose: not a -inf mask
    fixed = BUFFER_TRIU.replace('att.masked_fill(self.future[:T, :T], float("-inf"))',
                                "att.masked_fill(self.future[:T, :T], 0.0)")
    assert found(fixed) == []


# A loss helper of a LightningModule, called from training_step: log_softmax's output is saved
# for backward, so filling it in place makes backward raise.
LOSS_HELPER = '''import torch
import torch.nn.functional as F
import pytorch_lightning as pl


class Module(pl.LightningModule):
    def smoothed_nll(self, logits, target):
        lprobs = F.log_softmax(logits, dim=-1)
        pad = target.eq(0).unsqueeze(-1)
        lprobs.masked_fill_(pad, 0.0)
        return -lprobs.gather(-1, target.unsqueeze(-1)).sum()

    def training_step(self, batch, batch_idx):
        return self.smoothed_nll(self(batch["x"]), batch["y"])
'''


def test_inplace_fill_of_log_softmax_in_a_training_helper_is_found(found: Found) -> None:
    assert found(LOSS_HELPER) == [(10, "MC505")]


def test_out_of_place_fill_in_a_training_helper_is_silent(found: Found) -> None:
    fixed = LOSS_HELPER.replace("lprobs.masked_fill_(pad, 0.0)",
                                "lprobs = lprobs.masked_fill(pad, 0.0)")
    assert found(fixed) == []


def test_inplace_fill_in_a_helper_only_inference_calls_is_silent(found: Found) -> None:
    fixed = LOSS_HELPER.replace(
        "    def training_step(self, batch, batch_idx):",
        "    @torch.no_grad()\n    def predict_step(self, batch, batch_idx):")
    assert found(fixed) == []


# The same tokenizer mask inverted for one key-padding keyword and passed as it is for another
# (conventions.md section 1: `attention_mask` means 1 = real token).
KEY_PADDING_BOTH_WAYS = '''import torch
import torch.nn as nn


class Translator(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.transformer = nn.Transformer(d, 4, batch_first=True)

    def forward(self, src, src_attention_mask, tgt):
        return self.transformer(
            src, tgt,
            src_key_padding_mask=src_attention_mask == 0,
            memory_key_padding_mask=src_attention_mask,
        )
'''


def test_mask_inverted_for_one_key_padding_and_not_another_is_found(found: Found) -> None:
    assert found(KEY_PADDING_BOTH_WAYS) == [(14, "MC502")]


def test_mask_inverted_for_both_key_paddings_is_silent(found: Found) -> None:
    fixed = KEY_PADDING_BOTH_WAYS.replace("memory_key_padding_mask=src_attention_mask,",
                                          "memory_key_padding_mask=src_attention_mask == 0,")
    assert found(fixed) == []


def test_padding_mask_passed_as_it_is_to_both_is_silent(found: Found) -> None:
    fixed = KEY_PADDING_BOTH_WAYS.replace("src_key_padding_mask=src_attention_mask == 0,",
                                          "src_key_padding_mask=src_attention_mask,")
    assert found(fixed) == []


# A static KV cache written with index_copy_ and read up to an end computed on the line before
# (a Llama decode step): the keys hold the cache, so is_causal=True aligns the mask top-left.
STATIC_CACHE_READ = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def decode(self, q, k_new, v_new, cache_position):
        b = q.shape[0]
        self.k_cache[:b].index_copy_(2, cache_position, k_new)
        self.v_cache[:b].index_copy_(2, cache_position, v_new)
        end = int(cache_position[-1]) + 1
        k = self.k_cache[:b, :, :end]
        v = self.v_cache[:b, :, :end]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''


def test_static_cache_read_to_a_computed_end_with_is_causal_is_found(found: Found) -> None:
    assert found(STATIC_CACHE_READ) == [(19, "MC510")]


def test_static_cache_read_to_a_computed_end_with_a_mask_is_silent(found: Found) -> None:
    fixed = STATIC_CACHE_READ.replace("is_causal=True", "attn_mask=mask").replace(
        "cache_position):", "cache_position, mask):")
    assert found(fixed) == []


def test_cache_read_to_a_fixed_size_with_is_causal_is_silent(found: Found) -> None:
    fixed = STATIC_CACHE_READ.replace("end = int(cache_position[-1]) + 1", "end = k_new.shape[2]")
    assert found(fixed) == []


# A keep-mask by its name, cast to float and added to the scores (the seed article's
# "mask is additive, not multiplicative").
KEEP_ADDED = '''import torch


def attend(q, k, attention_mask):
    logits = q @ k.transpose(-2, -1)
    keep = (attention_mask != 0).float()
    logits = logits + keep[:, None, None, :]
    return logits.softmax(dim=-1)
'''


def test_float_keep_mask_added_to_scores_is_found(found: Found) -> None:
    assert found(KEEP_ADDED) == [(7, "MC508")]


def test_float_keep_mask_turned_additive_is_silent(found: Found) -> None:
    fixed = KEEP_ADDED.replace("logits + keep[:, None, None, :]",
                               "logits + (1.0 - keep[:, None, None, :]) * -1e4")
    assert found(fixed) == []


# A fill value handed down to every layer of an nn.ModuleList in forward.
LAYER_LOOP_FILL = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)

    def forward(self, x, pad, fill):
        q, k = self.qk(x).chunk(2, -1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(pad[:, None, :], fill)
        return scores.softmax(-1) @ x


class Model(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])

    def forward(self, x, pad):
        for blk in self.blocks:
            x = blk(x, pad, -1e9)
        return x
'''


def test_fill_value_handed_to_each_layer_of_a_module_list_is_found(found: Found) -> None:
    assert found(LAYER_LOOP_FILL) == [(13, "MC501")]


def test_fill_value_that_fits_half_handed_to_each_layer_is_silent(found: Found) -> None:
    assert found(LAYER_LOOP_FILL.replace("-1e9", "-1e4")) == []
