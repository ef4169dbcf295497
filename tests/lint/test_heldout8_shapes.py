"""Real code shapes behind the misses and the false alarm of the eighth held-out recall set (public
reports cited nowhere else, each bug written the way its project writes code): each bad source
next to the findings it must give, and its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# transformers 4.33's Llama mask helpers (PR #26421): the causal helper concatenates a zero
# block for the cache prefix in front of its finfo.min mask, and the two helpers' masks are summed.
LLAMA_MASKS = '''import torch


def _make_causal_mask(shape, dtype, device, past_key_values_length=0):
    bsz, tgt_len = shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(cond < (cond + 1).view(mask.size(-1), 1), 0)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _expand_mask(mask, dtype, tgt_len):
    inverted = 1.0 - mask[:, None, None, :].expand(mask.size(0), 1, tgt_len, mask.size(1)).to(dtype)
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


def prepare(attention_mask, shape, embeds, past):
    combined = None
    if shape[-1] > 1:
        combined = _make_causal_mask(shape, embeds.dtype, embeds.device, past)
    if attention_mask is not None:
        expanded = _expand_mask(attention_mask, embeds.dtype, shape[-1])
        combined = expanded if combined is None else expanded + combined
    return combined
'''


def test_finfo_min_mask_concatenated_with_zeros_then_summed_is_found(found: Found) -> None:
    assert found(LLAMA_MASKS) == [(25, "MC513")]


def test_finfo_min_masks_combined_with_masked_fill_are_silent(found: Found) -> None:
    fixed = LLAMA_MASKS.replace(
        "expanded + combined",
        "combined.masked_fill(expanded.bool(), torch.finfo(embeds.dtype).min)")
    assert found(fixed) == []


def test_cat_of_zeros_and_a_finfo_min_mask_holds_finfo_min() -> None:
    low = torch.finfo(torch.float32).min
    mask = torch.full((2, 2), low).triu(1)
    joined = torch.cat([torch.zeros(2, 3), mask], dim=-1)
    assert (joined == low).any()
    assert torch.isinf(joined + joined).any()  # the sum MC513 warns of overflows


# TinyTorch (harvard-edge/cs249r_book PR #1785): a teaching framework's own
# `scaled_dot_product_attention(Q, K, V, mask)` takes a 1/0 keep mask and computes
# `(1 - mask) * MASK_VALUE`; the GPT module built an additive -inf mask for it.
TINYTORCH = '''import math
import torch
from torch import nn


def _apply_mask(scores, mask):
    return scores + (1 - mask) * torch.finfo(scores.dtype).min


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = _apply_mask(scores, mask)
    return torch.softmax(scores, dim=-1) @ V


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return x + scaled_dot_product_attention(q, k, v, mask)


class GPT(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))

    def _causal_mask(self, t):
        return torch.triu(torch.ones(t, t) * float("-inf"), diagonal=1)

    def forward(self, x):
        mask = self._causal_mask(x.shape[1])
        for block in self.blocks:
            x = block(x, mask)
        return x
'''


def test_additive_mask_reaching_one_minus_mask_is_found_at_the_subtraction(found: Found) -> None:
    assert found(TINYTORCH) == [(7, "MC523")]


def test_keep_mask_reaching_one_minus_mask_is_silent(found: Found) -> None:
    # The fix: a 1/0 float mask. The file's own `scaled_dot_product_attention` is not torch's,
    # so a float 0/1 mask passed to it is not one SDPA would add (it was MC508 before).
    fixed = TINYTORCH.replace('torch.triu(torch.ones(t, t) * float("-inf"), diagonal=1)',
                              "torch.tril(torch.ones(t, t))")
    assert found(fixed) == []


def test_torch_sdpa_imported_by_that_name_is_still_torchs(found: Found) -> None:
    source = '''import torch
from torch.nn.functional import scaled_dot_product_attention


def attend(q, k, v, lengths):
    keep = (torch.arange(k.shape[-2])[None, :] < lengths[:, None]).float()
    return scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
'''
    assert found(source) == [(7, "MC508")]


def test_one_minus_an_additive_mask_reads_it_as_keep() -> None:
    additive = torch.triu(torch.ones(3, 3) * float("-inf"), diagonal=1)
    adder = (1 - additive) * torch.finfo(torch.float32).min
    assert torch.isinf(adder).sum() == 3  # the future: -inf
    assert (adder[torch.tril(torch.ones(3, 3)).bool()] == torch.finfo(torch.float32).min).all()


# transformers PR #20605: a bf16 extended mask multiplied by the float32 minimum.
BF16_PRODUCT = '''import torch


def extended_mask(attention_mask):
    extended = attention_mask[:, None, None, :].to(dtype=torch.bfloat16)
    return (1.0 - extended) * torch.finfo(torch.float32).min
'''


def test_bf16_mask_times_float32_minimum_is_found(found: Found) -> None:
    assert found(BF16_PRODUCT) == [(6, "MC517")]


def test_bf16_mask_times_its_own_minimum_is_silent(found: Found) -> None:
    assert found(BF16_PRODUCT.replace("torch.finfo(torch.float32)",
                                      "torch.finfo(torch.bfloat16)")) == []


def test_float32_mask_times_float32_minimum_is_silent(found: Found) -> None:
    assert found(BF16_PRODUCT.replace("dtype=torch.bfloat16", "dtype=torch.float32")) == []


def test_bf16_times_float32_minimum_overflows() -> None:
    m = torch.tensor([1.0, 0.0]).to(torch.bfloat16)
    assert torch.isinf((1.0 - m) * torch.finfo(torch.float32).min).any()
    assert not torch.isinf((1.0 - m) * torch.finfo(torch.bfloat16).min).any()


# The same product where the dtype is chosen at run time (transformers PR #20605's XLA
# downcast): a helper returning torch.bfloat16 or None, `or` the model's dtype.
XLA_DOWNCAST = '''import os
import torch


def _downcast_dtype():
    if os.environ.get("XLA_USE_BF16") == "1":
        return torch.bfloat16
    return None


def extended_mask(attention_mask, dtype=None):
    if dtype is None:
        dtype = _downcast_dtype() or torch.float32
    extended = attention_mask[:, None, None, :].to(dtype=dtype)
    return (1.0 - extended) * torch.finfo(torch.float32).min
'''


def test_mask_cast_to_a_maybe_bf16_dtype_times_float32_minimum_is_found(found: Found) -> None:
    assert found(XLA_DOWNCAST) == [(15, "MC517")]


def test_mask_cast_to_a_maybe_bf16_dtype_times_its_own_minimum_is_silent(found: Found) -> None:
    assert found(XLA_DOWNCAST.replace("torch.finfo(torch.float32)", "torch.finfo(dtype)")) == []


def test_mask_cast_to_a_float32_only_dtype_times_float32_minimum_is_silent(found: Found) -> None:
    assert found(XLA_DOWNCAST.replace("return torch.bfloat16", "return torch.float32")) == []


FP16_FLAG = '''import torch


def fill(scores, keep, fp16):
    dtype = torch.float16 if fp16 else torch.float32
    scores = scores.to(dtype)
    return scores.masked_fill(keep == 0, torch.finfo(torch.float32).min)
'''


def test_fill_of_a_tensor_cast_to_fp16_on_one_branch_is_found(found: Found) -> None:
    assert found(FP16_FLAG) == [(7, "MC517")]


def test_fill_of_it_with_its_own_minimum_is_silent(found: Found) -> None:
    assert found(FP16_FLAG.replace("torch.finfo(torch.float32)", "torch.finfo(scores.dtype)")) == []


def test_fp16_fill_with_float32_minimum_raises() -> None:
    scores = torch.zeros(2, dtype=torch.float16)
    try:
        scores.masked_fill(torch.tensor([True, False]), torch.finfo(torch.float32).min)
    except RuntimeError as exc:
        assert "overflow" in str(exc)
    else:
        raise AssertionError("float16 masked_fill with the float32 minimum did not raise")


def test_a_files_own_softmax_is_still_a_softmax(found: Found) -> None:
    # Only SDPA's name is read as the file's own function: a local `softmax` still normalises,
    # so a 0/1 mask multiplied into its input still leaves weight on the masked positions.
    source = '''import torch


def softmax(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def pool(scores, lengths):
    keep = (torch.arange(scores.shape[-1])[None, :] < lengths[:, None]).float()
    return softmax(scores * keep, dim=-1)
'''
    assert [code for _, code in found(source)] == ["MC520"]
    fixed = source.replace("softmax(scores * keep, dim=-1)",
                           'softmax(scores.masked_fill(keep == 0, float("-inf")), dim=-1)')
    assert found(fixed) == []


def test_summed_finfo_min_masks_in_a_file_that_clamps_its_scores_are_silent(found: Found) -> None:
    # InternVL's QLLaMA (a copy of early transformers Llama): the attention clamps its weights
    # back to finfo.min right after adding the mask, so the -inf of the sum never reaches softmax.
    clamped = LLAMA_MASKS + '''

def attend(weights, mask):
    weights = weights + mask
    weights = torch.max(weights, torch.tensor(torch.finfo(weights.dtype).min))
    return torch.softmax(weights, dim=-1)
'''
    assert found(clamped) == []


def test_a_clamp_to_finfo_min_undoes_the_overflow_of_the_sum() -> None:
    low = torch.finfo(torch.float32).min
    summed = torch.tensor([[low + low, low, 0.0]])
    assert torch.isinf(summed).any()
    weights = torch.max(torch.zeros(1, 3) + summed, torch.tensor(low))
    assert not torch.isinf(weights).any()
    assert not torch.isnan(torch.softmax(weights, dim=-1)).any()


def test_the_files_own_sdpa_defined_inside_a_function_is_still_its_own(found: Found) -> None:
    fixed = TINYTORCH.replace('torch.triu(torch.ones(t, t) * float("-inf"), diagonal=1)',
                              "torch.tril(torch.ones(t, t))")
    head, body = fixed.split("\n\n\n", 1)
    nested = head + "\n\n\ndef build():\n" + "".join(
        "    " + line if line else line for line in body.splitlines(keepends=True))
    assert found(nested) == []
