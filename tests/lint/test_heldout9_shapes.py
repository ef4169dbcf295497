"""Real code shapes behind the misses of the ninth held-out recall set (public reports cited
nowhere else, each bug written the way its project writes code): each bad source next to the
findings it must give, and its correct form next to none, with the torch facts they rest on
(torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# deepvoice3_pytorch#172: a length mask built as a byte tensor and inverted with `~`.
BYTE_MASK = '''import torch


def get_mask_from_lengths(memory, memory_lengths):
    mask = memory.data.new(memory.size(0), memory.size(1)).byte().zero_()
    for idx, l in enumerate(memory_lengths):
        mask[idx][:l] = 1
    return ~mask
'''


def test_inverting_a_byte_mask_is_found(found: Found) -> None:
    assert found(BYTE_MASK) == [(8, "MC518")]


def test_inverting_a_bool_mask_is_silent(found: Found) -> None:
    assert found(BYTE_MASK.replace(".byte().zero_()", ".bool().zero_()")) == []


def test_bitwise_not_of_a_byte_mask_is_not_its_complement() -> None:
    mask = torch.zeros(2, 4).byte()
    mask[0][:2] = 1
    assert (~mask).tolist() == [[254, 254, 255, 255], [255, 255, 255, 255]]  # all non-zero


# InseeFrLab/torchTextClassifiers PR #96: `attention_mask == 1` (True at the real tokens, the
# SDPA keep-mask) reused as a masked_fill condition.
KEEP_FILL = '''import torch
import torch.nn.functional as F


def label_attention(q, k, v, attention_mask, compute_attention_matrix=False):
    attn_mask = attention_mask == 1
    attn_mask = attn_mask.unsqueeze(1).unsqueeze(2)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    matrix = None
    if compute_attention_matrix:
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(attn_mask, float("-inf"))
        matrix = scores.softmax(dim=-1)
    return y, matrix
'''


def test_attention_mask_equal_one_as_fill_condition_is_found(found: Found) -> None:
    assert found(KEEP_FILL) == [(12, "MC519")]


def test_inverted_condition_is_silent(found: Found) -> None:
    assert found(KEEP_FILL.replace("masked_fill(attn_mask,", "masked_fill(~attn_mask,")) == []


def test_attention_mask_equal_one_is_true_at_real_tokens() -> None:
    attention_mask = torch.tensor([[1, 1, 0]])
    assert (attention_mask == 1).tolist() == [[True, True, False]]
    scores = torch.zeros(1, 3).masked_fill(attention_mask == 1, float("-inf"))
    assert torch.isinf(scores[0, :2]).all() and scores[0, 2] == 0  # only the padding is left


# coleygroup/DiffMS#25: MIST's attention reshapes its key-padding mask per head, asserts it is
# bool, and hands it to a helper method (defined below the caller) that adds it to the scores.
ASSERTED_BOOL = '''import torch
import torch.nn.functional as F
from torch import nn


class MultiheadAttention(nn.Module):
    def multi_head_attention_forward(self, q, k, v, key_padding_mask):
        attn_mask = key_padding_mask.view(2, 1, 1, 4).expand(-1, 2, -1, -1).reshape(4, 1, 4)
        assert attn_mask.dtype == torch.bool
        return self._scaled_dot_product_attention(q, k, v, attn_mask)

    def _scaled_dot_product_attention(self, q, k, v, attn_mask=None):
        attn = torch.bmm(q, k.transpose(-2, -1))
        if attn_mask is not None:
            new_attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype)
            new_attn_mask.masked_fill_(attn_mask, float("-inf"))
            attn += attn_mask
        return torch.bmm(F.softmax(attn, dim=-1), v)
'''


def test_bool_mask_by_assertion_added_in_a_later_helper_is_found_at_the_addition(
        found: Found) -> None:
    assert found(ASSERTED_BOOL) == [(17, "MC509")]


def test_the_converted_mask_added_is_silent(found: Found) -> None:
    assert found(ASSERTED_BOOL.replace("attn += attn_mask", "attn += new_attn_mask")) == []


def test_an_assertion_of_another_dtype_says_nothing(found: Found) -> None:
    assert found(ASSERTED_BOOL.replace("torch.bool\n", "torch.float32\n", 1)) == []


def test_a_bool_mask_added_to_scores_adds_one() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[True, False, False]])
    assert (scores + keep).tolist() == [[1.0, 0.0, 0.0]]  # nothing is masked


# Every call of a helper passes the same kind of mask: the finding is made where the helper adds
# (or multiplies) it; when the calls disagree, at the call that passes the wrong kind.
HELPER_ADDS = '''import torch


def attend(scores, mask):
    scores = scores + mask
    return scores.softmax(-1)


def run(scores, lengths):
    pad = torch.arange(4)[None, :] >= lengths[:, None]
    return attend(scores, pad)
'''


def test_a_helper_every_call_gives_a_bool_mask_is_found_at_its_addition(found: Found) -> None:
    assert found(HELPER_ADDS) == [(5, "MC509")]


def test_a_helper_given_a_bool_and_an_additive_mask_is_found_at_the_bool_call(
        found: Found) -> None:
    mixed = HELPER_ADDS + '''

def run_additive(scores, lengths):
    pad = torch.arange(4)[None, :] >= lengths[:, None]
    return attend(scores, torch.zeros(pad.shape).masked_fill(pad, float("-inf")))
'''
    assert found(mixed) == [(11, "MC509")]


# ai.stackexchange.com/questions/41367: the 0/1 padding tensor multiplied into the scores, made
# by a helper from the lengths and carried through a ModuleList of blocks.
PRODUCT_DOWN_THE_STACK = '''import torch
from torch import nn


def lengths_to_padding_tensor(lengths, max_len):
    positions = torch.arange(max_len)
    return (positions[None, :] < lengths[:, None]).float()


class Attention(nn.Module):
    def attention(self, q, k, v, pad):
        scores = q @ k.transpose(-2, -1)
        scores = scores * pad[:, None, None, :]
        return scores.softmax(dim=-1) @ v

    def forward(self, x, pad):
        return self.attention(x, x, x, pad)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, pad):
        return x + self.attn(x, pad)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x, lengths):
        pad = lengths_to_padding_tensor(lengths, x.shape[1])
        for block in self.blocks:
            x = block(x, pad)
        return x
'''


def test_a_0_1_tensor_multiplied_into_scores_three_modules_down_is_found_at_the_product(
        found: Found) -> None:
    assert found(PRODUCT_DOWN_THE_STACK) == [(13, "MC520")]


def test_the_padding_filled_instead_is_silent(found: Found) -> None:
    fixed = PRODUCT_DOWN_THE_STACK.replace(
        "scores * pad[:, None, None, :]",
        'scores.masked_fill(pad[:, None, None, :] == 0, float("-inf"))')
    assert found(fixed) == []


def test_a_zero_score_still_gets_softmax_weight() -> None:
    weights = (torch.tensor([2.0, 1.0, 3.0]) * torch.tensor([1.0, 1.0, 0.0])).softmax(-1)
    assert weights[2] > 0.08  # the "masked" position keeps exp(0) of unnormalised weight


# pmixer/SASRec.pytorch#6: a float `tril(ones)` as the attn_mask of nn.MultiheadAttention blocks
# held in a ModuleList filled by `.append` (or built from a comprehension) and indexed.
MHA_LIST = '''import torch
from torch import nn


class SASRec(nn.Module):
    def __init__(self, d, heads, blocks):
        super().__init__()
        self.attention_layers = nn.ModuleList()
        for _ in range(blocks):
            new_attn_layer = nn.MultiheadAttention(d, heads)
            self.attention_layers.append(new_attn_layer)
        self.more = nn.ModuleList([nn.MultiheadAttention(d, heads) for _ in range(blocks)])

    def forward(self, seqs):
        tl = seqs.shape[0]
        attention_mask = torch.tril(torch.ones((tl, tl)))
        for i in range(len(self.attention_layers)):
            seqs, _ = self.attention_layers[i](seqs, seqs, seqs, attn_mask=attention_mask)
        for layer in self.more:
            seqs, _ = layer(seqs, seqs, seqs, attn_mask=attention_mask)
        return seqs
'''


def test_float_triangle_given_to_listed_attention_modules_is_found(found: Found) -> None:
    assert found(MHA_LIST) == [(18, "MC508"), (20, "MC508")]


def test_bool_triangle_given_to_listed_attention_modules_is_silent(found: Found) -> None:
    fixed = MHA_LIST.replace("torch.tril(torch.ones((tl, tl)))",
                             "~torch.tril(torch.ones((tl, tl), dtype=torch.bool))")
    assert found(fixed) == []


def test_a_float_triangle_attn_mask_hides_no_future_token() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 1).eval()
    x = torch.randn(3, 1, 4)
    y = x.clone()
    y[2] += 1.0  # only the last token changes
    float_mask = torch.tril(torch.ones(3, 3))
    bool_mask = ~torch.tril(torch.ones(3, 3, dtype=torch.bool))
    with torch.no_grad():
        leak = mha(x, x, x, attn_mask=float_mask)[0][0] - mha(y, y, y, attn_mask=float_mask)[0][0]
        kept = mha(x, x, x, attn_mask=bool_mask)[0][0] - mha(y, y, y, attn_mask=bool_mask)[0][0]
    assert leak.abs().max() > 1e-4 and kept.abs().max() < 1e-6


# RVC-Boss/GPT-SoVITS#965: the semantic tokens' triangle padded, concatenated under the prefix
# block and OR-ed with the padding mask before `masked_fill_` turns it into -inf.
PADDED_TRIANGLE = '''import torch
from torch.nn import functional as F


def make_mask(x_len, y_len, padding, scores):
    x_attn_mask = F.pad(torch.zeros((x_len, x_len), dtype=torch.bool), (0, y_len), value=True)
    y_attn_mask = F.pad(
        torch.triu(
            torch.ones(y_len, y_len, dtype=torch.bool),
            diagonal=0,
        ),
        (x_len, 0),
        value=False,
    )
    xy_attn_mask = torch.concat([x_attn_mask, y_attn_mask], dim=0)
    xy_attn_mask = xy_attn_mask.logical_or(padding)
    new_attn_mask = torch.zeros_like(xy_attn_mask, dtype=scores.dtype)
    new_attn_mask.masked_fill_(xy_attn_mask, float("-inf"))
    return new_attn_mask
'''


def test_padded_concatenated_triangle_hiding_the_diagonal_is_found_at_its_argument(
        found: Found) -> None:
    assert found(PADDED_TRIANGLE) == [(10, "MC503")]


def test_padded_triangle_above_the_diagonal_is_silent(found: Found) -> None:
    assert found(PADDED_TRIANGLE.replace("diagonal=0,", "diagonal=1,")) == []


def test_padded_triangle_with_diagonal_zero_hides_each_token_itself() -> None:
    x_len, y_len = 2, 3
    y = F.pad(torch.triu(torch.ones(y_len, y_len, dtype=torch.bool), diagonal=0), (x_len, 0),
              value=False)
    assert all(y[i, x_len + i] for i in range(y_len))  # True = masked: its own position
