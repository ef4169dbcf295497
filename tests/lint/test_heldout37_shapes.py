"""The shapes of held-out 37 (vision-language, speech, video, retrieval, point clouds) that its
first reading missed, each bad source next to the findings it must give, its correct form next
to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# BLIP-2's Q-Former: the tokenizer's int mask goes through a helper that returns it reshaped for
# the encoder and as a bool causal AND for the decoder; the layers it is handed to fill with
# `~mask`. What the layers get is known only once the helper is read with its seeded argument:
# a third walk.
INT_MASK_ON_ONE_PATH = """\
import torch
from torch import nn


class Tokenizer:
    def __call__(self, rows):
        mask = torch.zeros((len(rows), 8), dtype=torch.long)
        for i, r in enumerate(rows):
            mask[i, : len(r)] = 1
        return {"input_ids": mask.clone(), "attention_mask": mask}


class SelfAttention(nn.Module):
    def forward(self, scores, attention_mask=None):
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        return scores.softmax(-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = SelfAttention()

    def forward(self, scores, attention_mask):
        return self.attention(scores, attention_mask=attention_mask)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList(Layer() for _ in range(2))

    @staticmethod
    def extended_mask(attention_mask, is_decoder=False):
        if not is_decoder:
            return attention_mask[:, None, None, :]
        n = attention_mask.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        return causal[None, None] & attention_mask[:, None, None, :].bool()

    def forward(self, scores, attention_mask, is_decoder=False):
        extended = self.extended_mask(attention_mask, is_decoder=is_decoder)
        for layer in self.layer:
            scores = layer(scores, extended)
        return scores


def train(rows, scores):
    model, tokenizer = Encoder(), Tokenizer()
    batch = tokenizer(rows)
    model(scores, batch["attention_mask"])
    return model(scores, batch["attention_mask"], is_decoder=True)
"""


def test_invert_of_an_int_mask_fails_where_a_bool_one_works() -> None:
    keep = torch.tensor([[1, 1, 0]])
    assert (~keep).tolist() == [[-2, -2, -1]]  # every entry non-zero
    scores = torch.zeros(1, 3)
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        scores.masked_fill(~keep, -1.0)
    filled = scores.masked_fill(keep == 0, -1.0)  # the fix works for both dtypes
    assert filled.tolist() == scores.masked_fill(~keep.bool(), -1.0).tolist()


def test_an_int_mask_on_one_path_of_a_helper_is_found_at_the_invert(found: Found) -> None:
    assert found(INT_MASK_ON_ONE_PATH) == [(16, "MC518")]
    fixed = INT_MASK_ON_ONE_PATH.replace("masked_fill(~attention_mask,",
                                         "masked_fill(attention_mask == 0,")
    assert found(fixed) == []


# FastSpeech2: the variance adaptor's forward returns a tuple whose last position is the bool
# mel mask, unpacked by the model and handed to a block that subtracts it from 1.
TUPLE_FROM_A_FORWARD = """\
import torch
from torch import nn


def lengths_mask(lengths, n):
    ids = torch.arange(0, n).unsqueeze(0)
    return ids >= lengths.unsqueeze(1)


class Adaptor(nn.Module):
    def forward(self, x, lens, target=None):
        if target is not None:
            lens = target
        else:
            lens = lens * 2
        mel_mask = lengths_mask(lens, x.shape[1])
        return x, lens, mel_mask


class Block(nn.Module):
    def forward(self, x, mask):
        return x * (1 - mask.unsqueeze(-1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.adaptor = Adaptor()
        self.block = Block()

    def forward(self, x, lens):
        x, mel_lens, mel_mask = self.adaptor(x, lens)
        return self.block(x, mel_mask)
"""


def test_one_minus_a_bool_mask_raises() -> None:
    with pytest.raises(RuntimeError, match="Subtraction"):
        _ = 1 - torch.tensor([True, False])


def test_a_tuple_position_of_a_modules_forward_is_followed(found: Found) -> None:
    assert found(TUPLE_FROM_A_FORWARD) == [(22, "MC512")]
    fixed = TUPLE_FROM_A_FORWARD.replace("x * (1 - mask.unsqueeze(-1))",
                                         "x.masked_fill(mask.unsqueeze(-1), 0)")
    assert found(fixed) == []


# TimeSformer: the frame mask is repeated for every patch and given new axes under a new name
# before it reaches the attention that adds it.
RESHAPED_UNDER_A_NAME = """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, mask=None):
        attn = q @ k.transpose(-2, -1)
        if mask is not None:
            attn = attn + mask
        return attn.softmax(dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.temporal_attn = Attention()

    def forward(self, q, k, hw, frame_keep):
        temporal_mask = frame_keep.repeat_interleave(hw, dim=0)[:, None, None, :]
        return self.temporal_attn(q, k, mask=temporal_mask)


class Video(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, q, k, hw, num_frames):
        t = q.shape[2]
        frame_keep = torch.arange(t)[None, :] < num_frames[:, None]
        return self.block(q, k, hw, frame_keep)
"""


def test_a_bool_mask_added_to_scores_adds_one() -> None:
    scores = torch.zeros(1, 2)
    keep = torch.tensor([[True, False]])
    assert (scores + keep).softmax(-1)[0, 1] > 0.2  # the "masked" key keeps weight


def test_a_mask_reshaped_under_a_name_is_followed_into_the_call(found: Found) -> None:
    assert found(RESHAPED_UNDER_A_NAME) == [(9, "MC509")]
    fixed = RESHAPED_UNDER_A_NAME.replace("attn = attn + mask",
                                          "attn = attn.masked_fill(~mask, float(\"-inf\"))")
    assert found(fixed) == []


# open_clip: a helper builds the causal triangle the wrong way for SDPA's bool mask, stored in a
# buffer the class reads in one place: the fix is the helper's line.
HELPER_TRIANGLE_IN_A_BUFFER = """\
import torch
import torch.nn.functional as F
from torch import nn


def build_causal_mask(num_pos):
    return torch.triu(torch.ones(num_pos, num_pos, dtype=torch.bool), diagonal=1)


class Attention(nn.Module):
    def forward(self, q, attn_mask=None):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=attn_mask)


class Text(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.attn = Attention()
        self.register_buffer("attn_mask", build_causal_mask(n), persistent=False)

    def forward(self, x):
        seq_len = x.shape[1]
        return self.attn(x, attn_mask=self.attn_mask[:seq_len, :seq_len])
"""


def test_a_helper_triangle_read_once_is_reported_where_it_is_made(found: Found) -> None:
    assert found(HELPER_TRIANGLE_IN_A_BUFFER) == [(7, "MC521")]
    fixed = HELPER_TRIANGLE_IN_A_BUFFER.replace(
        "torch.triu(torch.ones(num_pos, num_pos, dtype=torch.bool), diagonal=1)",
        "torch.tril(torch.ones(num_pos, num_pos, dtype=torch.bool))")
    assert found(fixed) == []


def test_a_buffer_read_in_two_places_keeps_the_finding_at_its_use(found: Found) -> None:
    twice = HELPER_TRIANGLE_IN_A_BUFFER.replace(
        "        return self.attn(x, attn_mask=self.attn_mask[:seq_len, :seq_len])",
        "        y = self.attn(x, attn_mask=self.attn_mask[:seq_len, :seq_len])\n"
        "        return y + self.attn(x, attn_mask=~self.attn_mask[:seq_len, :seq_len])")
    assert found(twice) == [(23, "MC521")]


# Point-MAE: a (batch, groups) validity mask handed through Encoder and Block to the SDPA of
# Attention under the name `mask`: the fix is where it becomes attn_mask, three calls down.
PADDING_THREE_CALLS_DOWN = """\
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def forward(self, q, mask=None):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, mask=None):
        return x + self.attn(x, mask=mask)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x, mask):
        for block in self.blocks:
            x = block(x, mask=mask)
        return x


class PointModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()

    def forward(self, x, num_centers):
        valid = torch.arange(x.shape[2])[None, :] < num_centers[:, None]
        return self.encoder(x, valid)
"""


def test_a_two_dimensional_padding_mask_is_read_as_queries_by_keys() -> None:
    q = torch.randn(2, 1, 2, 4)  # batch 2, 1 head, 2 queries
    valid = torch.tensor([[True, True], [True, False]])  # (batch, keys)
    as_given = F.scaled_dot_product_attention(q, q, q, attn_mask=valid)
    right = F.scaled_dot_product_attention(q, q, q, attn_mask=valid[:, None, None, :])
    # query 1 of the first sequence gets the second sequence's padding
    assert not torch.allclose(as_given[0, 0, 1], right[0, 0, 1])


def test_a_padding_mask_is_reported_where_it_becomes_an_attn_mask(found: Found) -> None:
    assert found(PADDING_THREE_CALLS_DOWN) == [(8, "MC515")]
    fixed = PADDING_THREE_CALLS_DOWN.replace("attn_mask=mask)",
                                             "attn_mask=mask[:, None, None, :])")
    assert found(fixed) == []


def test_a_padding_mask_passed_as_attn_mask_is_reported_at_that_call(found: Found) -> None:
    named = PADDING_THREE_CALLS_DOWN.replace(
        "    def forward(self, x, mask=None):\n        return x + self.attn(x, mask=mask)",
        "    def forward(self, x, attn_mask=None):\n"
        "        return x + self.attn(x, mask=attn_mask)",
    ).replace("block(x, mask=mask)", "block(x, attn_mask=mask)")
    assert found(named) == [(27, "MC515")]


# sentence-transformers: a tokenizer class of the file returns its mask under the tokenizer's
# key, built as zeros with 1 written at the real tokens; the pooling hands it to
# key_padding_mask (True = padding).
TOKENIZER_CLASS_DICT = """\
import torch
from torch import nn


class Tokenizer:
    def __call__(self, rows):
        input_ids = torch.zeros((len(rows), 8), dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)], attention_mask[i, : len(r)] = torch.tensor(r), 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class Pooling(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.tokenizer = Tokenizer()
        self.attention = nn.MultiheadAttention(dim, 4, batch_first=True)

    def tokenize(self, rows):
        return self.tokenizer(rows)

    def forward(self, features):
        tokens = features["token_embeddings"]
        attention_mask = features["attention_mask"].bool()
        pooled, _ = self.attention(tokens, tokens, tokens, key_padding_mask=attention_mask)
        return pooled
"""


def test_a_keep_mask_as_key_padding_mask_attends_to_padding_only() -> None:
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(1, 3, 4)
    keep = torch.tensor([[True, True, False]])
    _, weights = mha(x, x, x, key_padding_mask=keep)
    assert weights[0, :, :2].abs().sum() == 0  # the real tokens get no weight


def test_a_tokenizer_class_mask_read_from_the_features_dict(found: Found) -> None:
    assert found(TOKENIZER_CLASS_DICT) == [(26, "MC502")]
    fixed = TOKENIZER_CLASS_DICT.replace("key_padding_mask=attention_mask)",
                                         "key_padding_mask=~attention_mask)")
    assert found(fixed) == []
