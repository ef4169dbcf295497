"""The shapes of held-out 34 (science and generative models) that its first reading missed,
each bad source next to the findings it must give, its correct form next to none, and the
torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# ClimaX's variable aggregation: a mask of the variables each sample has, named for what it
# keeps, handed to nn.MultiheadAttention's key_padding_mask (True = padding).
CLIMAX = """\
import torch.nn as nn


class Aggregate(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.var_agg = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, query, x, var_mask):
        available = var_mask.repeat_interleave(4, dim=0)
        return self.var_agg(query, x, x, key_padding_mask=available)
"""


def test_key_padding_mask_true_hides_the_key() -> None:
    mha = nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(1, 3, 4)
    available = torch.tensor([[True, True, False]])
    _, weights = mha(x, x, x, key_padding_mask=available)
    assert weights is not None and torch.all(weights[0, :, :2] == 0)  # the real ones hidden


def test_a_mask_named_for_what_it_keeps_as_key_padding_mask(found: Found) -> None:
    assert found(CLIMAX) == [(11, "MC502")]
    assert found(CLIMAX.replace("key_padding_mask=available", "key_padding_mask=~available")
                 ) == []


# DNABERT's BERT: the mixin's get_extended_attention_mask casts the tokenizer mask to the
# hidden states' dtype and returns it as it is; the layers add it to their scores.
DNABERT = """\
import torch
import torch.nn as nn


class ModuleUtilsMixin:
    def get_extended_attention_mask(self, attention_mask, dtype=torch.float32):
        extended = attention_mask[:, None, None, :]
        extended = extended.to(dtype=dtype)
        return extended


class SelfAttention(nn.Module):
    def forward(self, q, k, attention_mask=None):
        scores = q @ k.transpose(-1, -2)
        if attention_mask is not None:
            scores = scores + attention_mask
        return scores.softmax(-1)


class Model(nn.Module, ModuleUtilsMixin):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.attn = SelfAttention()

    def forward(self, input_ids, attention_mask):
        hidden_states = self.embed(input_ids)
        extended = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        return self.attn(hidden_states, hidden_states, attention_mask=extended)
"""


def test_a_float_keep_mask_added_masks_nothing() -> None:
    scores = torch.zeros(1, 1, 1, 3)
    mask = torch.tensor([[1, 1, 0]])[:, None, None, :].to(torch.float32)
    weights = (scores + mask).softmax(-1)[0, 0, 0]
    assert weights[2] > 0.15  # the padded key: 1 / (2e + 1), not 0


def test_a_method_of_a_base_class_is_followed_from_self(found: Found) -> None:
    assert found(DNABERT) == [(8, "MC508")]
    fixed = DNABERT.replace("extended.to(dtype=dtype)",
                            "(1.0 - extended.to(dtype=dtype)) * torch.finfo(dtype).min")
    assert found(fixed) == []


# Enformer's attention over padded intervals: the per-bin mask laid out on the query axis.
ENFORMER = """\
import torch


def attend(q, k, bin_mask=None):
    logits = q @ k.transpose(-1, -2)
    if bin_mask is not None:
        logits = logits.masked_fill(~bin_mask[:, None, :, None], -torch.finfo(logits.dtype).max)
    return logits.softmax(dim=-1)
"""


def test_a_fill_of_whole_query_rows_hides_nothing() -> None:
    q = torch.randn(1, 1, 3, 4)
    keep = torch.tensor([[True, True, False]])
    logits = q @ q.transpose(-1, -2)
    rows = logits.masked_fill(~keep[:, None, :, None], -torch.finfo(logits.dtype).max)
    weights = rows.softmax(-1)
    assert weights[0, 0, 0, 2] > 0  # a real query still reads the padded key
    assert torch.allclose(weights[0, 0, 2], torch.full((3,), 1 / 3))  # the padded row: uniform


def test_a_mask_parameter_on_the_query_axis(found: Found) -> None:
    assert found(ENFORMER) == [(7, "MC514")]
    assert found(ENFORMER.replace("[:, None, :, None]", "[:, None, None, :]")) == []
    # softmaxed over dim=-2, the third axis is the keys'
    assert found(ENFORMER.replace("dim=-1", "dim=-2")) == []
    # a pair mask (query AND key axes) is MC507's, not this
    pair = ENFORMER.replace("~bin_mask[:, None, :, None]",
                            "~(bin_mask[:, None, :, None] & bin_mask[:, None, None, :])")
    assert all(code != "MC514" for _, code in found(pair))


# Pangu-Weather's shifted windows: an additive 0/-inf mask made by two fills, multiplied in.
PANGU = """\
import torch
import torch.nn as nn


def gen_mask(n):
    windows = torch.arange(n).float()
    attn_mask = windows[None, :] - windows[:, None]
    return attn_mask.masked_fill(attn_mask != 0, float("-inf")).masked_fill(attn_mask == 0, 0.0)


class Attention(nn.Module):
    def forward(self, x, mask=None):
        attention = x @ x.transpose(-2, -1)
        if mask is not None:
            attention = attention * mask[None]
        return attention.softmax(dim=-1)


class Block(nn.Module):
    def __init__(self, n, roll):
        super().__init__()
        self.attention = Attention()
        self.register_buffer("attn_mask", gen_mask(n) if roll else None, persistent=False)

    def forward(self, x):
        return self.attention(x, mask=self.attn_mask)
"""


def test_an_additive_mask_multiplied_in_gives_nan() -> None:
    windows = torch.tensor([0.0, 0.0, 1.0])
    diff = windows[None, :] - windows[:, None]
    mask = diff.masked_fill(diff != 0, float("-inf")).masked_fill(diff == 0, 0.0)
    scores = torch.tensor([[2.0, 1.0, -1.0]] * 3)
    product = scores * mask
    assert torch.equal(product[0, :2], torch.zeros(2))  # the kept scores are zeroed
    assert product[0, 2] == float("inf")  # a negative masked score turns +inf
    assert torch.isnan(product.softmax(-1)[0]).all()


def test_a_zero_fill_keeps_an_additive_mask_additive(found: Found) -> None:
    assert found(PANGU) == [(15, "MC523")]
    assert found(PANGU.replace("attention * mask[None]", "attention + mask[None]")) == []
