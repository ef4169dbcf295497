"""Real code shapes behind the misses (and one false alarm) of the third held-out recall set:
each bad source next to the findings it must give, and its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)




# lag-llama's CausalSelfAttention (time-series-foundation-models/lag-llama#81): keys
# concatenated with a cache only when one exists, then is_causal=True for every call.
LAG_LLAMA = '''import torch
import torch.nn.functional as F


class CausalSelfAttention(torch.nn.Module):
    def forward(self, q, k, v, use_kv_cache=False):
        if use_kv_cache:
            if self.kv_cache is not None:
                cached_k, cached_v = self.kv_cache
                k = torch.cat([cached_k, k], dim=-2)
                v = torch.cat([cached_v, v], dim=-2)
            self.kv_cache = (k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''
# PR #84's fix: the causal flag only on the path that has no cache, an explicit mask on the other.
LAG_LLAMA_FIXED = LAG_LLAMA.replace(
    "        return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n",
    "        if use_kv_cache and self.kv_cache is not None:\n"
    "            keep = torch.ones(k.size(-2), k.size(-2), dtype=torch.bool).tril()\n"
    "            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[-q.size(-2):])\n"
    "        else:\n"
    "            return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n")


def test_is_causal_after_a_conditional_cache_concatenation_is_found(found: Found) -> None:
    assert found(LAG_LLAMA) == [(13, "MC510")]


def test_is_causal_on_the_branch_gated_by_the_cache_test_is_silent(found: Found) -> None:
    assert found(LAG_LLAMA_FIXED) == []


def test_an_if_around_both_the_cache_and_the_call_does_not_hide_it(found: Found) -> None:
    # Code wrapped whole in one branch: the `if` is shared, so it says nothing about the cache.
    body = "".join("    " + line + "\n" if line else "\n" for line in LAG_LLAMA.splitlines()[3:])
    source = ("import torch\nimport torch.nn.functional as F\nfrom typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    pass\nelse:\n" + body)
    assert found(source) == [(16, "MC510")]


# Llama-style static cache (meta-llama model.py) handed to SDPA with the causal flag.
STATIC_CACHE = '''import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def forward(self, xq, xk, xv, start_pos):
        bsz, seqlen = xq.shape[0], xq.shape[2]
        self.cache_k[:bsz, :, start_pos : start_pos + seqlen] = xk
        self.cache_v[:bsz, :, start_pos : start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, :, : start_pos + seqlen]
        values = self.cache_v[:bsz, :, : start_pos + seqlen]
        return F.scaled_dot_product_attention(xq, keys, values, is_causal=True)
'''


def test_keys_read_from_a_static_cache_up_to_the_new_tokens_hold_the_cache(found: Found) -> None:
    assert found(STATIC_CACHE) == [(12, "MC510")]
    # A window of the cache that does not end at the new tokens is not read as the cache.
    window = STATIC_CACHE.replace(": start_pos + seqlen]\n        values",
                                  ":seqlen]\n        values")
    assert found(window) == []


# diffusers#14342 / onnxscript#580: a bool mask without a mask word in its name added to scores.
BOOL_ADDED = '''import math
import torch


def reference(q, k, v):
    keep = torch.rand(6, 6) > 0.3
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    return torch.softmax(scores + keep, dim=-1) @ v


def text_to_image(attn_weight, context_lens, n):
    positions = torch.arange(n)
    context_keep = (positions[None, :] < context_lens[:, None])[:, None, None, :]
    attn_weight += context_keep
    return attn_weight


def add_padding_bias(scores, tokens, pad_id):
    pad = tokens.eq(pad_id)[:, None, None, :]
    scores.add_(pad)
    return scores
'''
BOOL_FILLED = (BOOL_ADDED.replace("scores + keep", "scores.masked_fill(~keep, float('-inf'))")
               .replace("attn_weight += context_keep",
                        "attn_weight = attn_weight.masked_fill(~context_keep, -torch.inf)")
               .replace("scores.add_(pad)", "scores.masked_fill_(pad, float('-inf'))"))


def test_a_bool_mask_of_any_name_added_to_scores_is_found(found: Found) -> None:
    assert found(BOOL_ADDED) == [(8, "MC509"), (14, "MC509"), (20, "MC509")]
    assert found(BOOL_FILLED) == []


def test_a_bool_added_to_something_that_is_not_scores_is_not_reported(found: Found) -> None:
    # Counting with bools (`total + is_pad`) is not attention.
    source = ("import torch\n\n\ndef count(ids, total):\n"
              "    is_pad = ids == 0\n    return total + is_pad\n")
    assert found(source) == []


# A sum handed straight to softmax is scores plus a mask, whatever the scores are called
# (`s`, `a`, `x` in a short reference implementation).
BOOL_SUMMED_INTO_SOFTMAX = '''import math
import torch


def reference(q, k, v):
    keep = torch.rand(6, 6) > 0.3
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(s + keep, dim=-1) @ v


def eager(a, keep4d):
    return (a + keep4d.bool()).softmax(-1)
'''


def test_a_bool_added_in_the_sum_given_to_softmax_is_found(found: Found) -> None:
    assert found(BOOL_SUMMED_INTO_SOFTMAX) == [(8, "MC509"), (12, "MC509")]
    fixed = (BOOL_SUMMED_INTO_SOFTMAX
             .replace("s + keep", "s.masked_fill(~keep, float('-inf'))")
             .replace("a + keep4d.bool()", "a.masked_fill(~keep4d.bool(), float('-inf'))"))
    assert found(fixed) == []
    # A bool added to something that never reaches softmax is still not scores.
    assert found("import torch\n\n\ndef count(ids, x):\n    return (x + (ids == 0)).sum()\n") == []


# chatglm3-base-tuning#1: modeling_chatglm's `full_attention_mask -= padding_mask.unsqueeze(-1) - 1`
# once the padding mask is bool.
BOOL_MINUS = '''import torch


def get_masks(input_ids, pad_token_id):
    padding_mask = input_ids.ne(pad_token_id)
    full_attention_mask = torch.ones(2, 4, 4).tril_()
    full_attention_mask -= padding_mask.unsqueeze(-1) - 1
    return (full_attention_mask < 0.5).bool()
'''


def test_a_bool_minus_a_number_is_found(found: Found) -> None:
    assert found(BOOL_MINUS) == [(7, "MC512")]
    fixed = BOOL_MINUS.replace("unsqueeze(-1) - 1", "unsqueeze(-1).int() - 1")
    assert found(fixed) == []


# dotnet/TorchSharp#1135 (Python form) and a half causal-mask helper (spider-sql-finetune#1).
HALF_FILLS = '''import torch


def decoder_weights(q, k):
    weight = (q @ k.transpose(-2, -1)).half()
    mask = torch.ones_like(weight).triu(1).to(torch.bool)
    weight.masked_fill_(mask, -torch.finfo(torch.float32).max)
    return weight


def make_causal_mask(n):
    return torch.full((n, n), torch.finfo(torch.float32).min, dtype=torch.float16)
'''


def test_float32_extremes_into_half_tensors_are_found(found: Found) -> None:
    assert found(HALF_FILLS) == [(7, "MC517"), (12, "MC517")]
    fixed = HALF_FILLS.replace("torch.float32).max", "weight.dtype).max").replace(
        "torch.finfo(torch.float32).min", "torch.finfo(torch.float16).min")
    assert found(fixed) == []
    # The same float32 fill with no half dtype in sight stays silent.
    wide = HALF_FILLS.replace(".half()", ".float()").replace("dtype=torch.float16",
                                                             "dtype=torch.float32")
    assert found(wide) == []


def test_an_inverted_keep_mask_of_any_name_times_a_huge_negative_is_found(found: Found) -> None:
    # NVIDIA/apex#93: padding masked with -1e15, which float16 cannot hold.
    source = ("import torch\n\n\ndef pool(scores, keep):\n"
              "    scores = scores + (1.0 - keep.to(scores.dtype)) * -1e15\n"
              "    return scores.softmax(-1)\n")
    # the product gives -inf in float16 without raising: reported where the file speaks of
    # float16 (apex#93's code runs under apex's amp)
    assert found(source) == []
    source += "\n# This model runs in float16 (model.half()).\n"
    assert found(source) == [(5, "MC501")]
    assert found(source.replace("-1e15", "-1e4")) == []
    # The same factor times a probability is not a mask.
    assert found(source.replace("(1.0 - keep.to(scores.dtype))", "p")) == []
    # texar's beam search: `1.0 - finished.float()` is float32, so the product is too, and
    # float16 scores plus a float32 tensor give float32: nothing overflows.
    assert found(source.replace("keep.to(scores.dtype)", "keep.float()")) == []


def test_minus_inf_written_through_triu_indices_with_offset_zero_is_found(found: Found) -> None:
    # pbloem/former#10: "an offset of 0 will create a row of all -inf" (NaN after softmax).
    source = ("import torch\nimport torch.nn.functional as F\n\n\ndef self_attention(x):\n"
              "    b, t, e = x.size()\n    dot = torch.bmm(x, x.transpose(1, 2))\n"
              "    indices = torch.triu_indices(t, t, offset=0)\n"
              "    dot[:, indices[0], indices[1]] = float('-inf')\n"
              "    return torch.bmm(F.softmax(dot, dim=2), x)\n")
    assert found(source) == [(9, "MC503")]
    assert found(source.replace("offset=0", "offset=1")) == []
    # Covariance code writes values, not a mask, through the same indices (speechbrain).
    assert found(source.replace("float('-inf')", "0.5")) == []


# OpenNMT-py#1524: `1 - mask` on what OpenNMT's own sequence_mask helper returns (a bool).
SEQUENCE_MASK = '''import torch


def sequence_mask(lengths, max_len):
    return torch.arange(0, max_len).type_as(lengths).repeat(lengths.numel(), 1).lt(
        lengths.unsqueeze(1))


def attend(align, memory_lengths):
    mask = sequence_mask(memory_lengths, max_len=align.size(-1))
    align = align.masked_fill(1 - mask, float("-inf"))
    return torch.softmax(align, dim=-1)
'''


def test_a_helper_of_the_file_that_returns_a_comparison_gives_a_bool(found: Found) -> None:
    assert found(SEQUENCE_MASK) == [(11, "MC512")]
    assert found(SEQUENCE_MASK.replace("1 - mask", "~mask")) == []
    # A helper that may return something else (here None) says nothing about its calls.
    maybe = SEQUENCE_MASK.replace("    return torch.arange",
                                  "    if max_len is None:\n        return None\n"
                                  "    return torch.arange")
    assert found(maybe) == []
