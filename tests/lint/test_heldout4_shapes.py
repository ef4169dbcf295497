"""The causes behind the misses of held-out set 4 (benchmarks/lint_recall/heldout4), each as the
shape it takes in real code: function forms (`torch.bitwise_not`, `.sub(1)`, `torch.full_like`,
SDPA's arguments spread from a dict), values returned by the file's own functions and methods,
masks passed by keyword to a module of the file, a forward taking `input_ids` beside
`attention_mask`, constructor defaults read back from `self`, a boolean triangle used as a fill
condition, a zeros matrix cut in place. Each bad source next to the findings it must give, and
its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[..., list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# PaddlePaddle/PaddleFormers#4033: bitwise NOT on a 0/1 integer mask, spelled as a function.
BITWISE_NOT = '''import torch


def padding_of(batch, attention_mask: torch.Tensor):
    a = torch.bitwise_not(batch["attention_mask"])
    b = attention_mask.long().bitwise_not()
    return a, b
'''


def test_bitwise_not_of_an_integer_mask_is_found(found: Found) -> None:
    assert found(BITWISE_NOT) == [(5, "MC518"), (6, "MC518")]


def test_bitwise_not_of_a_bool_mask_is_silent(found: Found) -> None:
    fixed = BITWISE_NOT.replace('batch["attention_mask"])', 'batch["attention_mask"].bool())')
    fixed = fixed.replace(".long().bitwise_not()", ".bool().bitwise_not()")
    assert found(fixed) == []


# zai-org/GLM-4-Voice#182: arithmetic on a bool padding mask, as the method `.sub`.
BOOL_SUB = '''import torch


def get_masks(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    padding_mask = input_ids.ne(pad_token_id)
    full = torch.ones(input_ids.shape[0], input_ids.shape[1], input_ids.shape[1])
    full += padding_mask.unsqueeze(-1).sub(1)
    return full
'''


def test_sub_on_a_bool_mask_is_found(found: Found) -> None:
    assert found(BOOL_SUB) == [(7, "MC512")]


def test_sub_on_an_int_mask_is_silent(found: Found) -> None:
    fixed = BOOL_SUB.replace("input_ids.ne(pad_token_id)", "input_ids.ne(pad_token_id).int()")
    assert found(fixed) == []


# huggingface/lerobot#710: a float16 tensor filled with the float32 minimum via full_like.
FULL_LIKE = '''import torch


def masked_logits(q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    logits = (q @ k.transpose(-1, -2)).to(torch.float16)
    floor = torch.full_like(logits, torch.finfo(torch.float32).min)
    return torch.where(keep, logits, floor)
'''


def test_full_like_of_a_half_tensor_with_the_float32_minimum_is_found(found: Found) -> None:
    assert found(FULL_LIKE) == [(6, "MC517")]


def test_full_like_with_the_tensors_own_minimum_is_silent(found: Found) -> None:
    fixed = FULL_LIKE.replace("finfo(torch.float32)", "finfo(logits.dtype)")
    assert found(fixed) == []


# jingyaogong/minimind#497: attn_mask and is_causal=True, gathered in a dict first.
SPREAD = '''import torch.nn.functional as F


def attend(xq, xk, xv, attention_mask):
    attn_mask = attention_mask[:, None, None, :].bool()
    sdpa_kwargs = dict(attn_mask=attn_mask, dropout_p=0.0, is_causal=True)
    return F.scaled_dot_product_attention(xq, xk, xv, **sdpa_kwargs)
'''


def test_sdpa_arguments_spread_from_a_dict_are_read(found: Found) -> None:
    assert found(SPREAD) == [(7, "MC506")]
    literal = SPREAD.replace("dict(attn_mask=attn_mask, dropout_p=0.0, is_causal=True)",
                             '{"attn_mask": attn_mask, "is_causal": True}')
    assert found(literal, "b.py") == [(7, "MC506")]


def test_sdpa_arguments_spread_without_the_causal_flag_are_silent(found: Found) -> None:
    fixed = SPREAD.replace(", is_causal=True", "")
    assert found(fixed) == []


# NVIDIA-NeMo/Automodel#2658, huggingface/transformers#27114: two finfo.min planes made by the
# file's own helper (or its methods) and added.
PLANES = '''import torch


def _additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    min_value = torch.finfo(dtype).min
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, min_value)


def build(causal_keep: torch.Tensor, attention_mask: torch.Tensor, dtype: torch.dtype):
    causal_plane = _additive(causal_keep, dtype)[None, None]
    padding_plane = _additive(attention_mask.bool(), dtype)[:, None, None, :]
    return torch.add(causal_plane, padding_plane)


class Converter:
    def to_causal(self, n: int, dtype: torch.dtype):
        if n == 0:
            return None
        return torch.full((n, n), torch.finfo(dtype).min).triu(1).to(dtype)

    @staticmethod
    def _expand(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        inverted = 1.0 - mask[:, None, None, :].to(dtype)
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)

    def to_4d(self, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        causal = self.to_causal(mask.shape[-1], dtype)
        expanded = self._expand(mask, dtype)
        if causal is not None:
            expanded = causal + expanded
        return expanded
'''


def test_finfo_min_planes_returned_by_helpers_and_methods_and_added_are_found(found: Found) -> None:
    assert found(PLANES) == [(12, "MC513"), (30, "MC513")]


def test_a_method_that_may_return_none_says_nothing_outside_a_not_none_test(found: Found) -> None:
    unguarded = PLANES.replace(
        "        if causal is not None:\n            expanded = causal + expanded\n",
        "        expanded = causal + expanded\n")
    assert found(unguarded) == [(12, "MC513")]


def test_planes_combined_as_booleans_or_by_masked_fill_are_silent(found: Found) -> None:
    fixed = PLANES.replace(
        "    causal_plane = _additive(causal_keep, dtype)[None, None]\n"
        "    padding_plane = _additive(attention_mask.bool(), dtype)[:, None, None, :]\n"
        "    return torch.add(causal_plane, padding_plane)",
        "    keep = causal_keep[None, None] & attention_mask.bool()[:, None, None, :]\n"
        "    return _additive(keep, dtype)")
    fixed = fixed.replace("expanded = causal + expanded",
                          "expanded = causal.masked_fill(expanded.bool(), torch.finfo(dtype).min)")
    assert found(fixed) == []


# baichuan-inc/Baichuan-13B#172: the look-ahead triangle cut from a helper's all -inf matrix.
NEG_INF_HELPER = '''import torch


def _fill_with_neg_inf(t: torch.Tensor) -> torch.Tensor:
    return t.float().fill_(float("-inf")).type_as(t)


def future_mask(n: int) -> torch.Tensor:
    return torch.triu(_fill_with_neg_inf(torch.zeros([n, n])))
'''


def test_triu_of_a_helpers_neg_inf_matrix_with_diagonal_0_is_found(found: Found) -> None:
    assert found(NEG_INF_HELPER) == [(9, "MC503")]


def test_triu_of_a_helpers_neg_inf_matrix_with_diagonal_1_is_silent(found: Found) -> None:
    fixed = NEG_INF_HELPER.replace("torch.zeros([n, n])))", "torch.zeros([n, n])), 1)")
    assert found(fixed) == []


# jadore801120/attention-is-all-you-need-pytorch#148: a helper that returns `seq != pad_idx`
# (True = real token) handed to nn.MultiheadAttention as its key padding mask.
PAD_HELPER = '''import torch
import torch.nn as nn


def get_pad_mask(seq: torch.Tensor, pad_idx: int) -> torch.Tensor:
    return (seq != pad_idx).unsqueeze(-2)


class Encoder(nn.Module):
    def __init__(self, dim: int, pad_idx: int) -> None:
        super().__init__()
        self.pad_idx = pad_idx
        self.slf_attn = nn.MultiheadAttention(dim, 8, batch_first=True)

    def forward(self, x: torch.Tensor, src_seq: torch.Tensor) -> torch.Tensor:
        src_mask = get_pad_mask(src_seq, self.pad_idx)
        y, _ = self.slf_attn(x, x, x, key_padding_mask=src_mask.squeeze(1))
        return y
'''


def test_a_helpers_real_token_test_as_key_padding_mask_is_found(found: Found) -> None:
    assert found(PAD_HELPER) == [(17, "MC511")]


def test_a_helpers_padding_test_as_key_padding_mask_is_silent(found: Found) -> None:
    fixed = PAD_HELPER.replace("seq != pad_idx", "seq == pad_idx")
    assert found(fixed) == []


# lucidrains/x-transformers#164: a module that fills where its mask is True, given the
# tokenizer's mask by keyword from a forward that takes `input_ids` and `attention_mask`.
KEYWORD_MASK = '''import torch
import torch.nn as nn


class Attention(nn.Module):
    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        sim = x @ x.transpose(-1, -2)
        if mask is not None:
            sim = sim.masked_fill(mask[:, None, :], -torch.finfo(sim.dtype).max)
        return sim.softmax(dim=-1) @ x


class Classifier(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = Attention()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        return self.attn(x, mask=attention_mask.bool())
'''


def test_a_keep_mask_passed_by_keyword_as_a_fill_condition_is_found(found: Found) -> None:
    # the only call passes a keep-mask: reported at the fill that reads it as True = masked
    assert found(KEYWORD_MASK) == [(9, "MC519")]


def test_the_padding_mask_passed_by_keyword_is_silent(found: Found) -> None:
    fixed = KEYWORD_MASK.replace("mask=attention_mask.bool()", "mask=attention_mask == 0")
    assert found(fixed) == []


def test_attention_mask_without_token_ids_beside_it_says_nothing(found: Found) -> None:
    # an inner layer's `attention_mask` may be additive already: no evidence without input_ids
    inner = KEYWORD_MASK.replace("input_ids: torch.Tensor, attention_mask",
                                 "hidden: torch.Tensor, attention_mask").replace(
        "self.embed(input_ids)", "hidden")
    assert found(inner) == []


# pytorch/pytorch#110144 (a causal flag kept as a constructor default, keys with a cache) and
# NVIDIA/apex#1105 (a -1e10 fill value kept as a constructor default).
DEFAULTS = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, causal: bool = True, mask_value: float = -1e10) -> None:
        super().__init__()
        self.causal = causal
        self.mask_value = mask_value

    def forward(self, q, k, v, past_k, head_mask):
        k = torch.cat((past_k, k), dim=-2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        scores = (q @ k.transpose(-1, -2)).half()
        return y, scores.masked_fill(head_mask == 0, self.mask_value)
'''


def test_constructor_defaults_read_back_from_self_are_found(found: Found) -> None:
    assert found(DEFAULTS) == [(14, "MC510"), (16, "MC501")]


def test_constructor_defaults_that_are_safe_are_silent(found: Found) -> None:
    fixed = DEFAULTS.replace("causal: bool = True", "causal: bool = False").replace(
        "mask_value: float = -1e10", "mask_value: float = -1e4")
    assert found(fixed) == []


# TransformerLensOrg/TransformerLens#284: a boolean triangle with diagonal 0 (made by casting
# ones) as the condition of a fill: each token hides itself.
BOOL_TRIANGLE = '''import torch


def apply_causal_mask(attn_scores: torch.Tensor) -> torch.Tensor:
    ones = torch.ones(attn_scores.size(-2), attn_scores.size(-1))
    mask = ones.bool().triu()
    return torch.where(mask, torch.tensor(float("-inf")), attn_scores)


def zero_upper(scores: torch.Tensor) -> torch.Tensor:
    upper = torch.ones(4, 4, dtype=torch.bool).triu()
    return scores.masked_fill(upper, 0.0)
'''


def test_a_bool_triangle_with_diagonal_0_as_a_fill_condition_is_found(found: Found) -> None:
    assert found(BOOL_TRIANGLE) == [(6, "MC503")]


def test_a_bool_triangle_with_diagonal_1_is_silent(found: Found) -> None:
    fixed = BOOL_TRIANGLE.replace("ones.bool().triu()", "ones.bool().triu(1)")
    assert found(fixed) == []


# pytorch/pytorch#29820: a look-ahead mask made from zeros, cut in place, then filled `== 0`.
ZEROS_CUT = '''import torch


def future_mask(size: int) -> torch.Tensor:
    mask = torch.zeros(size, size)
    mask.triu_(1)
    mask.masked_fill_(mask == 0, float("-inf"))
    return mask
'''


def test_a_zeros_matrix_cut_in_place_then_filled_where_zero_is_found(found: Found) -> None:
    assert found(ZEROS_CUT) == [(7, "MC504")]


def test_a_ones_matrix_cut_in_place_then_filled_where_zero_is_silent(found: Found) -> None:
    fixed = ZEROS_CUT.replace("torch.zeros(size, size)", "torch.ones(size, size)").replace(
        "triu_(1)", "tril_()")
    assert found(fixed) == []


# jadore801120/attention-is-all-you-need-pytorch#16: the attention probabilities zeroed in
# place after softmax, whose backward reads its own output (backward raises on torch 2.13).
SOFTMAX_INPLACE = '''import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def forward(self, q, k, v, key_pad, query_pad):
        attn = torch.matmul(q, k.transpose(2, 3))
        attn = attn.masked_fill(key_pad[:, None, None, :], float("-inf"))
        attn = torch.softmax(attn, dim=-1)
        attn.masked_fill_(query_pad[:, None, :, None], 0.0)
        return torch.matmul(attn, v)
'''


def test_an_in_place_fill_of_a_softmax_output_in_forward_is_found(found: Found) -> None:
    assert found(SOFTMAX_INPLACE) == [(10, "MC505")]


def test_an_out_of_place_fill_of_a_softmax_output_is_silent(found: Found) -> None:
    fixed = SOFTMAX_INPLACE.replace("attn.masked_fill_(", "attn = attn.masked_fill(")
    assert found(fixed) == []
    # the in-place fill of the scores before softmax needs nothing autograd saved
    before = SOFTMAX_INPLACE.replace(
        '        attn = attn.masked_fill(key_pad[:, None, None, :], float("-inf"))\n', "").replace(
        "        attn = torch.softmax(attn, dim=-1)\n"
        "        attn.masked_fill_(query_pad[:, None, :, None], 0.0)\n",
        '        attn.masked_fill_(key_pad[:, None, None, :], float("-inf"))\n'
        "        attn = torch.softmax(attn, dim=-1)\n")
    assert found(before, "b.py") == []


# pytorch/examples#784: nn.TransformerEncoder(src, mask, src_key_padding_mask) called
# positionally with the tokenizer's mask (1 = real token) where the key padding mask goes.
ENCODER_POSITIONAL = '''import torch
import torch.nn as nn


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int, d_model: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)

    def forward(self, src_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(src_ids), None, attention_mask.bool())
'''


def test_a_keep_mask_in_the_key_padding_position_of_an_encoder_is_found(found: Found) -> None:
    assert found(ENCODER_POSITIONAL) == [(13, "MC502")]


def test_the_padding_mask_in_the_key_padding_position_is_silent(found: Found) -> None:
    fixed = ENCODER_POSITIONAL.replace("attention_mask.bool())", "attention_mask == 0)")
    assert found(fixed) == []


# open-lm-engine/lm-engine#498: a causal flag that is True whenever no mask is given, on keys
# that include the cache.
CONDITIONAL_FLAG = '''import torch
import torch.nn.functional as F


def attend(q, k, v, past, attention_mask=None, causal=True):
    k = torch.cat([past[0], k], dim=2)
    v = torch.cat([past[1], v], dim=2)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attention_mask,
        is_causal=True if attention_mask is None else False)
'''


def test_a_causal_flag_true_on_one_path_with_cached_keys_is_found(found: Found) -> None:
    assert found(CONDITIONAL_FLAG) == [(10, "MC510")]


def test_a_conditional_flag_without_a_cache_is_silent(found: Found) -> None:
    fixed = CONDITIONAL_FLAG.replace("    k = torch.cat([past[0], k], dim=2)\n", "").replace(
        "    v = torch.cat([past[1], v], dim=2)\n", "")
    assert found(fixed) == []


# nyu-mll/jiant#465: BERT given the padding positions as its attention_mask (1 = real token).
PAD_AS_ATTENTION_MASK = '''import torch.nn as nn


class Probe(nn.Module):
    def __init__(self, bert: nn.Module, pad_id: int = 0) -> None:
        super().__init__()
        self.bert = bert
        self.pad_id = pad_id

    def forward(self, ids, segs):
        return self.bert(ids, token_type_ids=segs, attention_mask=(ids == self.pad_id).long())
'''


def test_the_padding_positions_as_attention_mask_are_found(found: Found) -> None:
    assert found(PAD_AS_ATTENTION_MASK) == [(11, "MC511")]


def test_the_real_tokens_as_attention_mask_are_silent(found: Found) -> None:
    fixed = PAD_AS_ATTENTION_MASK.replace("ids == self.pad_id", "ids != self.pad_id")
    assert found(fixed) == []


# huggingface/pytorch-image-models#2674: a helper adds whatever mask it gets to the scores; the
# block's forward passes its own parameter on; the encoder calls every block of a ModuleList
# with a bool mask by keyword.
ADDED_THROUGH_LAYERS = '''import torch
import torch.nn as nn


def maybe_add_mask(scores, attn_mask=None):
    return scores if attn_mask is None else scores + attn_mask


class Block(nn.Module):
    def forward(self, x, attn_mask=None):
        attn = x @ x.transpose(-2, -1)
        attn = maybe_add_mask(attn, attn_mask)
        return attn.softmax(dim=-1) @ x


class Encoder(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))

    def forward(self, x, patch_valid):
        keep = patch_valid.bool()[:, None, :]
        for blk in self.blocks:
            x = blk(x, attn_mask=keep)
        return x
'''


def test_a_bool_mask_reaching_an_addition_through_layers_is_found(found: Found) -> None:
    # the only call chain passes a bool mask: reported at the helper's addition
    assert found(ADDED_THROUGH_LAYERS) == [(6, "MC509")]


def test_an_additive_mask_reaching_the_addition_is_silent(found: Found) -> None:
    fixed = ADDED_THROUGH_LAYERS.replace(
        "keep = patch_valid.bool()[:, None, :]",
        "keep = torch.zeros(patch_valid.shape).masked_fill(~patch_valid.bool(), "
        "float('-inf'))[:, None, :]")
    assert found(fixed) == []
    # a helper that checks the mask's dtype takes either kind
    either = ADDED_THROUGH_LAYERS.replace(
        "    return scores if attn_mask is None else scores + attn_mask",
        "    if attn_mask is not None and attn_mask.dtype == torch.bool:\n"
        "        return scores.masked_fill(~attn_mask, float('-inf'))\n"
        "    return scores if attn_mask is None else scores + attn_mask")
    assert found(either, "b.py") == []


# jerryji1993/DNABERT#102 and ofirpress/attention_with_linear_biases#7: a mixin's method returns
# the 0/1 mask that the layers add to their scores; a model's method returns an additive ALiBi
# mask that a layer multiplies its weights by.
MASKS_FROM_METHODS = '''import torch
import torch.nn as nn


class MaskMixin:
    def get_extended_attention_mask(self, attention_mask):
        extended = attention_mask[:, None, None, :].to(torch.float32)
        return extended

    def get_alibi_mask(self, n):
        future = torch.triu(torch.full((n, n), float("-inf")), 1)
        return future[None]


class Layer(nn.Module):
    def forward(self, hidden, attention_mask, alibi):
        scores = hidden @ hidden.transpose(-1, -2) + attention_mask
        weights = scores * alibi
        return weights.softmax(-1) @ hidden


class Model(nn.Module, MaskMixin):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(depth)])

    def forward(self, hidden, attention_mask):
        extended = self.get_extended_attention_mask(attention_mask)
        alibi = self.get_alibi_mask(hidden.shape[1])
        for layer in self.layers:
            hidden = layer(hidden, extended, alibi)
        return hidden
'''


def test_masks_returned_by_methods_and_misused_by_layers_are_found(found: Found) -> None:
    # each mask reaches the layer from one call: the 0/1 mask reported at the cast that made
    # it float (the layer adds it out of its sight), the additive one where the layer
    # multiplies by it
    assert found(MASKS_FROM_METHODS) == [(7, "MC508"), (18, "MC523")]
    added = MASKS_FROM_METHODS.replace("        return extended\n",
                                       "        return (1.0 - extended) * -10000.0\n")
    assert found(added, "b.py") == [(18, "MC523")]


def test_masks_returned_by_methods_and_used_right_are_silent(found: Found) -> None:
    fixed = MASKS_FROM_METHODS.replace("        return extended\n",
                                       "        return (1.0 - extended) * -10000.0\n").replace(
        "weights = scores * alibi", "weights = scores + alibi")
    assert found(fixed) == []


# georg-wolflein/good-features#1: ABMIL's attention logits `A` (a single capital letter is a
# matrix there, not a constant) multiplied by the 0/1 instance mask with torch.mul.
ABMIL = '''import torch
import torch.nn.functional as F


def pool(A: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    A = torch.mul(A, valid)
    return F.softmax(A, dim=1)
'''


def test_a_mask_multiplied_into_single_letter_logits_with_torch_mul_is_found(found: Found) -> None:
    assert found(ABMIL) == [(6, "MC520")]


def test_a_fill_of_single_letter_logits_is_silent(found: Found) -> None:
    fixed = ABMIL.replace("torch.mul(A, valid)", "A.masked_fill(~valid, float('-inf'))")
    assert found(fixed) == []


# baichuan-inc/Baichuan-13B#172: the future mask plus the ALiBi bias is still an additive mask;
# multiplied into the weights it gives -inf/NaN.
ALIBI = '''import torch


def alibi_mask(slopes: torch.Tensor, n: int) -> torch.Tensor:
    alibi = slopes[:, None, None] * torch.arange(n)[None, None, :]
    future = torch.triu(torch.full((n, n), float("-inf")), 1)
    return future[None] + alibi


def attend(attn_weights: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    mask = alibi_mask(slopes, attn_weights.shape[-1])
    return (attn_weights * mask).softmax(-1)
'''


def test_an_alibi_mask_multiplied_into_the_weights_is_found(found: Found) -> None:
    assert found(ALIBI) == [(12, "MC523")]


def test_an_alibi_mask_added_to_the_weights_is_silent(found: Found) -> None:
    fixed = ALIBI.replace("attn_weights * mask", "attn_weights + mask")
    assert found(fixed) == []


# open-mmlab/mmdetection#12351: a bool mask "filled" with -9e15 stays bool (True everywhere it
# was filled); the fill itself never meets a float16 tensor, so no MC501 there.
FILLED_BOOL = '''import torch


def fuse(attn_weights: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    attention_mask = torch.arange(attn_weights.shape[-1])[None, :] < lengths[:, None]
    attention_mask = attention_mask.masked_fill(attention_mask == 0, -9e15)
    attn_weights = attn_weights + attention_mask[:, None, :]
    return attn_weights.softmax(dim=-1)
'''


def test_a_large_fill_of_a_bool_mask_is_the_added_bool_not_an_overflow(found: Found) -> None:
    assert found(FILLED_BOOL) == [(7, "MC509")]


# huggingface/transformers#17306: a helper adds a finfo.min padding plane into the finfo.min
# causal mask it is given.
ADD_PADDING = '''import torch


def add_padding(mask, attention_mask, dtype):
    padding = torch.zeros(attention_mask.shape, dtype=dtype).masked_fill(
        attention_mask == 0, torch.finfo(dtype).min)
    mask += padding[:, None, None, :]
    return mask


def build(attention_mask, n, dtype):
    causal = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]
    return add_padding(causal, attention_mask, dtype)
'''


def test_a_finfo_min_mask_given_to_a_helper_that_adds_another_is_found(found: Found) -> None:
    assert found(ADD_PADDING) == [(13, "MC513")]


def test_a_zero_mask_given_to_that_helper_is_silent(found: Found) -> None:
    fixed = ADD_PADDING.replace(
        "torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]",
        "torch.zeros((1, 1, n, n), dtype=dtype)")
    assert found(fixed) == []


def test_padding_positions_given_to_a_module_of_the_file_are_its_own_convention(
        found: Found) -> None:
    # mmpretrain's OFA decoder is defined in the same file and reads attention_mask as True =
    # padding: the caller follows the module's own convention
    own = PAD_AS_ATTENTION_MASK.replace(
        "import torch.nn as nn\n",
        "import torch.nn as nn\n\n\nclass Decoder(nn.Module):\n"
        "    def forward(self, ids, token_type_ids=None, attention_mask=None):\n"
        "        return ids\n").replace("self.bert = bert", "self.bert = Decoder()")
    assert found(own) == []


def test_an_in_place_fill_in_an_autograd_function_forward_is_silent(found: Found) -> None:
    # DeBERTa's XSoftmax (a torch.autograd.Function): its forward runs with grad disabled
    xsoftmax = '''import torch


class XSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(self, input, mask, dim):
        rmask = ~(mask.to(torch.bool))
        output = input.masked_fill(rmask, float("-inf"))
        output = torch.softmax(output, dim)
        output.masked_fill_(rmask, 0)
        self.save_for_backward(output)
        return output
'''
    assert found(xsoftmax) == []
    # The same fill in an nn.Module's forward is the autograd error it would be there.
    module = (xsoftmax.replace("torch.autograd.Function", "torch.nn.Module")
              .replace("    @staticmethod\n", "")
              .replace("        self.save_for_backward(output)\n", ""))
    assert found(module) == [(9, "MC505")]
