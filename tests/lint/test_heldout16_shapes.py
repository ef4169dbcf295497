"""Real code shapes behind the misses and the false alarm of the sixteenth held-out recall set
(the wrong mask and the API that meets it sit in different functions, written apart from the
engine): each bad source next to the findings it must give, its correct form next to none
(torch 2.13 CPU)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# torchtune's decoder is a class of its own named TransformerDecoder; its layers hand the mask
# (True = attend) to SDPA. Annotated so, it is not torch's nn.TransformerDecoder.
OWN_DECODER = '''import torch
from torch import nn


class TransformerDecoder(nn.Module):
    def forward(self, tokens, *, mask=None):
        return nn.functional.scaled_dot_product_attention(tokens, tokens, tokens, attn_mask=mask)


def generate(model: TransformerDecoder, prompt):
    n = prompt.size(1)
    causal_mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return model(prompt, mask=causal_mask)
'''


def test_a_class_of_the_file_named_like_torchs_is_the_files(found: Found) -> None:
    assert found(OWN_DECODER) == []


def test_torchs_own_decoder_annotated_is_still_torchs(found: Found) -> None:
    torch_decoder = OWN_DECODER.replace(
        "model: TransformerDecoder", "model: nn.MultiheadAttention").replace(
        "model(prompt, mask=causal_mask)", "model(prompt, prompt, prompt, attn_mask=causal_mask)")
    assert found(torch_decoder) == [(13, "MC521")]


def test_sdpa_attends_where_the_lower_triangle_is_true() -> None:
    q = torch.randn(1, 3, 4)
    keep = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    assert torch.allclose(out[:, 0], q[:, 0], atol=1e-6)  # the first query sees only itself


# PaLM's attention keeps `partial(F.scaled_dot_product_attention, is_causal=True)` on self and
# calls it with a padding mask on one path.
PARTIAL_ON_SELF = '''import torch.nn.functional as F
from functools import partial
from torch import nn


class ParallelBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attend = partial(F.scaled_dot_product_attention, is_causal=True)

    def forward(self, q, k, v, mask=None):
        if mask is not None:
            return self.attend(q, k, v, attn_mask=mask[:, None, None, :])
        return self.attend(q, k, v)
'''


def test_a_partial_of_sdpa_held_on_self_is_sdpa(found: Found) -> None:
    assert found(PARTIAL_ON_SELF) == [(13, "MC506")]


def test_the_partial_without_is_causal_is_silent(found: Found) -> None:
    assert found(PARTIAL_ON_SELF.replace(", is_causal=True)", ")")) == []


def test_sdpa_held_on_self_without_partial_is_sdpa(found: Found) -> None:
    held = PARTIAL_ON_SELF.replace("partial(F.scaled_dot_product_attention, is_causal=True)",
                                   "F.scaled_dot_product_attention").replace(
        "attn_mask=mask[:, None, None, :])", "attn_mask=mask[:, None, None, :], is_causal=True)")
    assert found(held) == [(13, "MC506")]


def test_the_math_backend_refuses_a_mask_with_is_causal() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 1, 3, 4)
    keep = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    with sdpa_kernel(SDPBackend.MATH):
        try:
            torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=keep,
                                                             is_causal=True)
        except RuntimeError:
            return
    raise AssertionError("the MATH backend took attn_mask with is_causal=True")


# sentence-transformers-style pooling: the tokenizer's keep-mask reaches nn.MultiheadAttention
# through a helper's **kwargs, the helper defined below the forward that calls it.
KWARGS_POOLING = '''import torch
from torch import nn


class AttentionPooling(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, 4, batch_first=True)

    def forward(self, features):
        tokens = features["token_embeddings"]
        return self._attend(tokens, key_padding_mask=features["attention_mask"].bool())

    def _attend(self, tokens, **attn_kwargs):
        out, _ = self.mha(tokens, tokens, tokens, **attn_kwargs)
        return out
'''


def test_a_keep_mask_through_kwargs_to_mha_is_found(found: Found) -> None:
    assert [code for _, code in found(KWARGS_POOLING)] in (["MC502"], ["MC511"])
    assert found(KWARGS_POOLING)[0][0] == 12


def test_the_padding_mask_through_kwargs_is_silent(found: Found) -> None:
    assert found(KWARGS_POOLING.replace('features["attention_mask"].bool()',
                                        'features["attention_mask"] == 0')) == []


def test_kwargs_to_sdpa_are_checked_as_sdpa_keywords(found: Found) -> None:
    to_sdpa = KWARGS_POOLING.replace(
        "out, _ = self.mha(tokens, tokens, tokens, **attn_kwargs)",
        "out = nn.functional.scaled_dot_product_attention(tokens, tokens, tokens, "
        "**attn_kwargs)").replace(
        'key_padding_mask=features["attention_mask"].bool()',
        'attn_mask=features["attention_mask"], is_causal=True')
    # (the (batch, seq) mask reaches attn_mask without its head and query axes: MC515 too)
    assert found(to_sdpa) == [(12, "MC506"), (12, "MC515")]
    fixed = to_sdpa.replace('features["attention_mask"],',
                            'features["attention_mask"][:, None, None, :],')
    assert found(fixed) == [(12, "MC506")]


def test_mha_reads_true_as_padding() -> None:
    mha = nn_mha()
    x = torch.randn(1, 3, 4)
    keep = torch.tensor([[True, True, False]])
    _, w_keep = mha(x, x, x, key_padding_mask=keep)
    assert w_keep[0, :, :2].abs().sum() == 0  # the real tokens get no weight at all
    _, w_pad = mha(x, x, x, key_padding_mask=~keep)
    assert w_pad[0, :, 2].abs().sum() == 0


def nn_mha() -> torch.nn.MultiheadAttention:
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(4, 1, batch_first=True)


# A method with a role, called from forward above its own definition (OpenNMT-style helper
# order): its calls are checked as a method defined above them would be.
METHOD_BELOW = '''import torch
from torch import nn


class Encoder(nn.Module):
    def forward(self, x, lengths):
        keep = torch.arange(x.size(1))[None, :] < lengths[:, None]
        return self._attend(x, keep)

    def _attend(self, x, mask):
        scores = x @ x.transpose(1, 2)
        scores = scores.masked_fill(mask[:, None, :], float("-inf"))
        return scores.softmax(-1) @ x
'''


def _line_of(source: str, text: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


# The same helper also given the padding mask by another call: the keep-mask call is the one
# that passes the wrong mask.
MIXED_CALLS = METHOD_BELOW.replace("        return self._attend(x, keep)\n",
                                   "        x = self._attend(x, ~keep)\n"
                                   "        return self._attend(x, keep)\n")


def test_a_method_below_its_caller_is_checked_at_the_call(found: Found) -> None:
    assert found(MIXED_CALLS) == [(9, "MC519")]


def test_a_method_every_call_gives_a_keep_mask_is_reported_at_its_fill(found: Found) -> None:
    # the helper reads its one kind of mask the wrong way round: the fix goes in the helper
    assert found(METHOD_BELOW) == [(12, "MC519")]


def test_the_method_below_given_the_padding_mask_is_silent(found: Found) -> None:
    assert found(METHOD_BELOW.replace("self._attend(x, keep)", "self._attend(x, ~keep)")) == []


def test_the_method_above_its_caller_gives_the_same_finding(found: Found) -> None:
    head, rest = METHOD_BELOW.split("    def forward", 1)
    forward, attend = rest.split("    def _attend", 1)
    above = head + "    def _attend" + attend + "\n    def forward" + forward.rstrip() + "\n"
    assert found(above) == [(_line_of(above, "masked_fill"), "MC519")]
    head, rest = MIXED_CALLS.split("    def forward", 1)
    forward, attend = rest.split("    def _attend", 1)
    above = head + "    def _attend" + attend + "\n    def forward" + forward.rstrip() + "\n"
    assert found(above) == [(_line_of(above, "self._attend(x, keep)"), "MC519")]


# Two levels of **kwargs (a decoder layer hands its own on to its attention), fed a dict of
# keywords: the dict is where the mask meets is_causal.
TWO_LEVELS = '''import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, x, **kwargs):
        return F.scaled_dot_product_attention(x, x, x, **kwargs)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, **kwargs):
        return x + self.attn(x, **kwargs)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, x, attention_mask):
        keep = attention_mask.bool()[:, None, None, :]
        attn_kwargs = {"attn_mask": keep, "is_causal": True}
        for layer in self.layers:
            x = layer(x, **attn_kwargs)
        return x
'''


def test_kwargs_handed_on_twice_reach_sdpa(found: Found) -> None:
    assert found(TWO_LEVELS) == [(27, "MC506")]


def test_kwargs_handed_on_twice_without_is_causal_are_silent(found: Found) -> None:
    assert found(TWO_LEVELS.replace(', "is_causal": True', "")) == []


# A module function written below the class that calls it.
FUNCTION_BELOW = '''import torch
from torch import nn


class Encoder(nn.Module):
    def forward(self, x, lengths):
        keep = torch.arange(x.size(1))[None, :] < lengths[:, None]
        return attend(x, keep)


def attend(x, mask):
    scores = x @ x.transpose(1, 2)
    scores = scores.masked_fill(mask[:, None, :], float("-inf"))
    return scores.softmax(-1) @ x
'''


def test_a_function_below_its_caller_is_checked_at_the_call(found: Found) -> None:
    mixed = FUNCTION_BELOW.replace("        return attend(x, keep)\n",
                                   "        x = attend(x, ~keep)\n        return attend(x, keep)\n")
    assert found(mixed) == [(9, "MC519")]
    assert found(FUNCTION_BELOW) == [(13, "MC519")]  # every call a keep-mask: at the fill


def test_the_function_below_given_the_padding_mask_is_silent(found: Found) -> None:
    assert found(FUNCTION_BELOW.replace("attend(x, keep)", "attend(x, ~keep)")) == []


def test_a_keep_mask_as_fill_condition_masks_the_real_tokens() -> None:
    scores = torch.zeros(1, 1, 3)
    keep = torch.tensor([[True, True, False]])
    weights = scores.masked_fill(keep[:, None, :], float("-inf")).softmax(-1)
    assert weights[0, 0].tolist() == [0.0, 0.0, 1.0]


# diffusers-style: the masking value is a property, the bias is made in the dtype the caller
# passes (float16 in a half pipeline).
PROPERTY_FILL = '''import torch
from torch import nn


class Attention(nn.Module):
    @property
    def mask_fill_value(self) -> float:
        return torch.finfo(torch.float32).min

    def prepare_attention_mask(self, attention_mask, dtype):
        bias = torch.zeros(attention_mask.shape, dtype=dtype)
        return bias.masked_fill(~attention_mask, self.mask_fill_value)
'''


def test_a_float32_minimum_property_filling_a_caller_dtype_bias_is_found(found: Found) -> None:
    assert found(PROPERTY_FILL) == [(12, "MC517")]


def test_the_bias_dtypes_own_minimum_is_silent(found: Found) -> None:
    assert found(PROPERTY_FILL.replace("torch.finfo(torch.float32).min",
                                       "torch.finfo(torch.float16).min").replace(
        "dtype=dtype", "dtype=torch.float16")) == []


def test_a_float32_bias_filled_with_the_float32_minimum_is_silent(found: Found) -> None:
    assert found(PROPERTY_FILL.replace("dtype=dtype", "dtype=torch.float32")) == []


def test_the_float32_minimum_does_not_fit_a_half_bias() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        bias = torch.zeros(2, dtype=dtype)
        try:
            bias.masked_fill(torch.tensor([True, False]), torch.finfo(torch.float32).min)
        except RuntimeError as e:
            assert "overflow" in str(e)
        else:
            raise AssertionError(f"{dtype} took the float32 minimum")


# AllenNLP annotates masks `torch.BoolTensor`; a masked_softmax that only multiplies the logits
# by the mask (without AllenNLP's second multiplication and renormalisation) leaks weight.
BOOL_ANNOTATED = '''from typing import Optional

import pytest
import torch


def masked_softmax(vector: torch.Tensor, mask: Optional[torch.BoolTensor], dim: int = -1):
    if mask is None:
        return torch.nn.functional.softmax(vector, dim=dim)
    mask = mask.float()
    return torch.nn.functional.softmax(vector * mask, dim=dim)
'''

ALLENNLP_MASKED_SOFTMAX = '''from typing import Optional

import pytest
import torch


def masked_softmax(vector: torch.Tensor, mask: Optional[torch.BoolTensor], dim: int = -1):
    if mask is None:
        result = torch.nn.functional.softmax(vector, dim=dim)
    else:
        mask = mask.float()
        result = torch.nn.functional.softmax(vector * mask, dim=dim)
        result = result * mask
        result = result / (result.sum(dim=dim, keepdim=True) + 1e-13)
    return result
'''


def test_a_bool_annotated_mask_multiplied_into_logits_is_found(found: Found) -> None:
    assert found(BOOL_ANNOTATED) == [(11, "MC520")]


def test_allennlps_renormalised_masked_softmax_is_silent(found: Found) -> None:
    assert found(ALLENNLP_MASKED_SOFTMAX) == []


def test_a_bool_annotation_is_no_proof_of_a_bool_subtraction(found: Found) -> None:
    """protenix annotates `is_polymer: torch.BoolTensor` and passes `1 - is_ligand`, an int
    indicator, so `1 - is_polymer` runs."""
    source = "import torch\n\n\ndef pad(x: torch.Tensor, mask: torch.BoolTensor | None):\n" \
             "    return x * (1 - mask)\n"
    assert found(source) == []


def test_multiplying_logits_by_the_mask_leaves_weight_on_padding() -> None:
    logits = torch.tensor([2.0, 2.0, 5.0])
    keep = torch.tensor([True, True, False])
    weights = torch.softmax(logits * keep.float(), dim=-1)
    assert abs(float(weights[2]) - 1 / (2 * math.exp(2) + 1)) < 1e-6  # exp(0) of the padding
    with pytest.raises(RuntimeError):
        _ = 1 - keep
