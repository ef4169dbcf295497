"""The false-alarm classes of the fresh5 precision set, each as the code shape it takes in real
code next to the buggy shape that must still be reported: a padding bias built in an integer dtype
(exllamav2), Falcon's `(m * 1.0).masked_fill(m, -1e9)` (petals), and an is_causal flag set only
where the mask is set to None (funasr's SenseVoice)."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# exllamav2 tokenizer.py:612: an int32 padding bias, deliberately -inf once cast to half.
INT_BIAS = '''import torch


def padding_mask(ids, pad_token_id):
    mask_bool = (ids == pad_token_id)
    mask = mask_bool.int()
    mask *= -65505 * 2
    mask = mask.half()
    return mask


def padding_bias(ids, pad_token_id, scores):
    mask = (ids == pad_token_id).long()
    return scores + mask * -1e9
'''


def test_an_integer_padding_bias_times_a_large_literal_is_silent(found: Found) -> None:
    # int32 * -131010 is exact; int64 * -1e9 is float32; float16 + either holds -inf, no raise.
    assert found(INT_BIAS) == []


def test_the_same_bias_in_a_half_dtype_is_still_reported(found: Found) -> None:
    half = INT_BIAS.replace("mask_bool.int()", "mask_bool.half()").replace(
        "(ids == pad_token_id).long()", "(ids == pad_token_id).to(scores.dtype)")
    assert found(half) == [(7, "MC501"), (14, "MC501")]


def test_an_int_literal_that_wraps_int32_is_still_reported(found: Found) -> None:
    # int32 * -10**10 wraps around (checked on torch 2.13): not the exact integer the fix needs.
    wraps = INT_BIAS.replace("-65505 * 2", "-10 ** 10")
    assert found(wraps) == [(7, "MC501")]


# petals falcon/block.py:231 (transformers' Falcon of 2023): the fill runs on `bool * 1.0`.
FALCON = '''import torch
import torch.nn.functional as F

DTYPE = torch.float16  # the model runs in float16

def attend(query_layer, key_layer, value_layer, attention_mask):
    attention_mask_float = (attention_mask * 1.0).masked_fill(attention_mask, float("-1e9")).to(
        query_layer.dtype)
    return F.scaled_dot_product_attention(query_layer, key_layer, value_layer,
                                          attn_mask=attention_mask_float)
'''


def test_a_fill_of_the_condition_times_a_python_float_is_silent(found: Found) -> None:
    assert found(FALCON) == []


def test_a_fill_of_another_tensor_times_a_float_is_still_reported(found: Found) -> None:
    other = FALCON.replace("(attention_mask * 1.0)", "(query_layer * 1.0)")
    assert found(other) == [(7, "MC501")]
    scores = FALCON.replace("(attention_mask * 1.0)", "query_layer")
    assert found(scores) == [(7, "MC501")]


def test_an_integer_tensor_filled_with_a_value_that_fits_int32_is_silent(found: Found) -> None:
    source = ("import torch\n\n\ndef bias(ids, pad):  # added to float16 scores\n"
              "    return ids.long().masked_fill(ids == pad, -1e9)\n")
    assert found(source) == []
    # -9e15 does not fit int32 (`.int()` raises then), so it is left to the rule
    assert found(source.replace("-1e9", "-9e15")) == [(5, "MC501")]


# funasr sense_voice/whisper_lib/model.py:272: is_causal=True only where the mask becomes None.
EXCLUSIVE = '''import torch
import torch.nn.functional as F


def qkv_attention(q, k, v, mask=None, **kwargs):
    is_pad_mask = kwargs.get("is_pad_mask", False)
    is_causal = kwargs.get("is_causal", False)
    if mask is not None:
        if not is_pad_mask:
            mask = None
            is_causal = True
        else:
            mask = mask.unsqueeze(1).to(torch.bool)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
'''


def test_is_causal_set_only_where_the_mask_is_set_to_none_is_silent(found: Found) -> None:
    assert found(EXCLUSIVE) == []
    no_else = EXCLUSIVE.replace(
        "        else:\n            mask = mask.unsqueeze(1).to(torch.bool)\n", "")
    assert found(no_else) == []


def test_is_causal_set_beside_a_mask_is_still_reported(found: Found) -> None:
    # The flag is set where the mask stays: both reach SDPA.
    kept = EXCLUSIVE.replace("            mask = None\n", "")
    assert found(kept) == [(13, "MC506")]
    # The mask is bound again after the if: both reach SDPA on the True path.
    rebound = EXCLUSIVE.replace("    return F.", "    mask = kwargs['pad']\n    return F.")
    assert found(rebound) == [(15, "MC506")]
    # Set to None first, then to a mask again in the same block.
    again = EXCLUSIVE.replace("            is_causal = True\n",
                              "            is_causal = True\n            mask = kwargs['pad']\n")
    assert found(again) == [(15, "MC506")]
    # Plain: causal set wherever a mask is given.
    plain = ("import torch.nn.functional as F\n\n\ndef f(q, k, v, mask=None):\n"
             "    is_causal = False\n    if mask is not None:\n        is_causal = True\n"
             "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, "
             "is_causal=is_causal)\n")
    assert found(plain) == [(8, "MC506")]
