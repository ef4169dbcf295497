"""Real code shapes behind the misses of the tenth held-out recall set (written apart from the
engine from public reports cited nowhere else): each bad source next to the findings it must
give, its correct form next to none, and the torch facts they rest on (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# huggingface/transformers#37807 proposes `is_causal = q_len > 1 and causal_mask is not None`:
# the flag is True exactly when the mask is passed too.
FLAG_NEEDS_MASK = '''import torch


def sdpa_attention_forward(module, query, key, value, attention_mask, is_causal=None):
    causal_mask = attention_mask
    if attention_mask is not None:
        causal_mask = causal_mask[:, :, :, : key.shape[-2]]
    if is_causal is None:
        is_causal = query.shape[2] > 1 and causal_mask is not None
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=causal_mask, is_causal=is_causal)
'''


def test_a_flag_true_only_with_the_mask_is_found(found: Found) -> None:
    assert found(FLAG_NEEDS_MASK) == [(9, "MC506")]


def test_a_flag_true_only_without_the_mask_is_silent(found: Found) -> None:
    assert found(FLAG_NEEDS_MASK.replace("is not None\n    return", "is None\n    return")) == []


def test_the_flag_tested_on_the_parameter_the_mask_came_from_is_found(found: Found) -> None:
    source = FLAG_NEEDS_MASK.replace("> 1 and causal_mask is not None",
                                     "> 1 and attention_mask is not None").replace(
        "    causal_mask = attention_mask\n    if attention_mask is not None:\n        causal_mask"
        " = causal_mask", "    causal_mask = attention_mask")
    assert found(source) == [(7, "MC506")]


def test_the_math_backend_refuses_a_mask_with_is_causal() -> None:
    q = torch.randn(1, 2, 4, 8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    with sdpa_kernel(SDPBackend.MATH), pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask, is_causal=True)


# pytorch/pytorch#27968: fastNLP's `seq_len_to_mask` (True at the real tokens, built from a
# name bound to `torch.arange(...)`) handed to nn.MultiheadAttention as key_padding_mask, through
# a module class defined below the model that uses it.
LATE_CLASS = '''import torch
from torch import nn


def seq_len_to_mask(seq_len, max_len=None):
    batch_size = seq_len.size(0)
    max_len = int(max_len) if max_len else seq_len.max().long()
    broad_cast_seq_len = torch.arange(max_len).expand(batch_size, -1).to(seq_len)
    return broad_cast_seq_len.lt(seq_len.unsqueeze(1))


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.self_attn = SelfAttention(dim)

    def forward(self, x, seq_len):
        key_padding_mask = seq_len_to_mask(seq_len, max_len=x.size(1))
        return self.self_attn(x, key_padding_mask=key_padding_mask)


class SelfAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x, key_padding_mask=None):
        return self.attn(x, x, x, key_padding_mask=key_padding_mask)[0]
'''


def test_a_keep_mask_for_a_class_defined_below_is_found(found: Found) -> None:
    assert found(LATE_CLASS) == [(18, "MC511")]


def test_the_same_file_with_the_class_first_gives_the_same_finding(found: Found) -> None:
    head, encoder = LATE_CLASS.split("class Encoder")
    encoder, attention = encoder.split("class SelfAttention")
    reordered = head + "class SelfAttention" + attention + "\n\nclass Encoder" + encoder
    line = reordered.splitlines().index(
        "        key_padding_mask = seq_len_to_mask(seq_len, max_len=x.size(1))") + 1
    assert found(reordered) == [(line, "MC511")]


def test_the_padding_mask_for_a_class_defined_below_is_silent(found: Found) -> None:
    padding = LATE_CLASS.replace("return broad_cast_seq_len.lt(", "return broad_cast_seq_len.ge(")
    assert found(padding) == []


def test_key_padding_mask_true_at_real_tokens_attends_to_padding() -> None:
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 4, 8)
    keep = torch.tensor([[True, True, False, False]])
    other = x.clone()
    other[:, 2:] = torch.randn(1, 2, 8)  # only the padding changes
    out = attn(x, x, x, key_padding_mask=keep)[0]
    assert not torch.allclose(out, attn(other, other, other, key_padding_mask=keep)[0])
    out = attn(x, x, x, key_padding_mask=~keep)[0]
    again = attn(other, other, other, key_padding_mask=~keep)[0]
    assert torch.allclose(out[:, :2], again[:, :2])


# mlwithme/BertWithPretrained#17: the model takes `attention_mask` as True = padding and hands it,
# through layers that all name it so, to nn.MultiheadAttention; the evaluation loop passes the
# Hugging Face convention (`x != PAD_IDX`) to the model it takes as a parameter.
PASS_THROUGH = '''import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.use_torch_multi_head:
            MultiHeadAttention = nn.MultiheadAttention
        else:
            raise NotImplementedError
        self.multi_head_attention = MultiHeadAttention(config.hidden_size, 2)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        return self.multi_head_attention(query, key, value, attn_mask=attn_mask,
                                         key_padding_mask=key_padding_mask)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)

    def forward(self, hidden_states, attention_mask=None):
        return self.attention(hidden_states, hidden_states, hidden_states,
                              key_padding_mask=attention_mask)[0]


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(2)])

    def forward(self, hidden_states, attention_mask=None):
        for i, layer in enumerate(self.layers):
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = nn.Embedding(100, config.hidden_size)
        self.encoder = BertEncoder(config)

    def forward(self, input_ids, attention_mask=None):
        return self.encoder(self.embeddings(input_ids), attention_mask=attention_mask)
'''
EVALUATE = '''

def evaluate(data_iter, model, PAD_IDX):
    for x, y in data_iter:
        padding_mask = (x != PAD_IDX).transpose(0, 1)
        logits = model(x, attention_mask=padding_mask)
'''


def test_layers_passing_their_own_attention_mask_on_are_silent(found: Found) -> None:
    assert found(PASS_THROUGH) == []


def test_a_keep_mask_handed_to_the_files_model_is_found_where_it_is_made(found: Found) -> None:
    line = (PASS_THROUGH + EVALUATE).splitlines().index(
        "        padding_mask = (x != PAD_IDX).transpose(0, 1)") + 1
    assert found(PASS_THROUGH + EVALUATE) == [(line, "MC511")]


def test_the_padding_mask_handed_to_the_files_model_is_silent(found: Found) -> None:
    assert found(PASS_THROUGH + EVALUATE.replace("x != PAD_IDX", "x == PAD_IDX")) == []


def test_a_model_argument_is_not_guessed_among_several_models(found: Found) -> None:
    other = '''

class OtherModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)

    def forward(self, x, attention_mask=None, key_padding_mask=None):
        return self.attn(x, x, x, key_padding_mask=key_padding_mask)[0]
'''
    assert found(PASS_THROUGH + other + EVALUATE) == []


# LLaVA-VL/LLaVA-NeXT#349: transformers' `_prepare_4d_attention_mask` (0 where the keep-mask is 1,
# finfo.min elsewhere) multiplied into the scores instead of added.
PREPARED_MULTIPLIED = '''import torch


def _prepare_4d_attention_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def attend(attn_weights, attention_mask):
    attn_weights = attn_weights * attention_mask
    return attn_weights.softmax(dim=-1)


def encode(attn_weights, patch_attention_mask):
    attention_mask = _prepare_4d_attention_mask(patch_attention_mask, attn_weights.dtype)
    return attend(attn_weights, attention_mask)
'''


def test_the_prepared_additive_mask_multiplied_is_found(found: Found) -> None:
    assert found(PREPARED_MULTIPLIED) == [(13, "MC523")]


def test_the_prepared_additive_mask_added_is_silent(found: Found) -> None:
    assert found(PREPARED_MULTIPLIED.replace("attn_weights * attention_mask",
                                             "attn_weights + attention_mask")) == []


def test_a_fill_where_a_tensor_is_non_zero_leaves_zero_and_the_fill() -> None:
    keep = torch.tensor([[1, 1, 0]])
    inverted = 1.0 - keep[:, None, None, :].to(torch.float16)
    mask = inverted.masked_fill(inverted.to(torch.bool), torch.finfo(torch.float16).min)
    assert mask.flatten().tolist() == [0.0, 0.0, torch.finfo(torch.float16).min]
    assert torch.isinf(torch.ones(1, 1, 1, 3, dtype=torch.float16) * mask * 2).any()


# THUwangcy/ReChorus#8 proposes "a tiny value like 1e-13" as the fill; pytorch/pytorch#26098
# proposes -1e-20: both leave the masked keys with the weight of a score of 0.
TINY_FILL = '''import torch


def scaled_dot_product_attention(q, k, v, d_k, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / d_k ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e-13)
    scores = (scores - scores.max()).softmax(dim=-1)
    return torch.matmul(scores, v)
'''


def test_a_tiny_fill_before_a_stable_softmax_is_found(found: Found) -> None:
    assert found(TINY_FILL) == [(7, "MC516")]


def test_a_large_fill_before_the_softmax_is_silent(found: Found) -> None:
    assert found(TINY_FILL.replace("-1e-13", "-float('inf')")) == []


def test_a_minus_one_sentinel_of_ranking_scores_is_silent(found: Found) -> None:
    source = '''import torch


def best_model(scores, counts, m):
    scores = scores.masked_fill(counts <= m, -1.0)
    return scores.argmax()
'''
    assert found(source) == []


def test_a_tiny_fill_keeps_the_masked_key_weight() -> None:
    scores = torch.tensor([[2.0, 1.0, 3.0]])
    keep = torch.tensor([[True, True, False]])
    tiny = scores.masked_fill(~keep, -1e-13).softmax(-1)
    assert tiny[0, 2] > 0.05  # as much as a score of 0 gets
    assert scores.masked_fill(~keep, float("-inf")).softmax(-1)[0, 2] == 0
