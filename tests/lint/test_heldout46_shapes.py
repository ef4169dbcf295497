"""Shapes of held-out 45's last SongNet miss and of held-out 46 (session 29): the bad source next
to the finding it must give, its correct form next to none, and the torch 2.13 fact it rests
on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# SongNet's whole shape: the mask module's triangle comes from a staticmethod called through its
# own class name, above the method's definition, and reaches the fill two modules down (a layer
# of a ModuleList, then its attention).
SONGNET_MASK_MODULE = """\
import torch
import torch.nn as nn


class SelfAttentionMask(nn.Module):
    def __init__(self, init_size=100):
        super().__init__()
        self.weights = SelfAttentionMask.get_mask(init_size)

    @staticmethod
    def get_mask(size):
        weights = torch.triu(torch.ones((size, size), dtype=torch.bool))
        return weights

    def forward(self, size):
        if size > self.weights.size(0):
            self.weights = SelfAttentionMask.get_mask(size)
        return self.weights[:size, :size].detach()


class Attention(nn.Module):
    def forward(self, scores, attn_mask=None):
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask.unsqueeze(0), float("-inf"))
        return scores.softmax(-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()

    def forward(self, scores, self_attn_mask=None):
        return self.self_attn(scores, attn_mask=self_attn_mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_mask = SelfAttentionMask()
        self.layers = nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, scores):
        mask = self.attn_mask(scores.size(-1))
        for layer in self.layers:
            scores = layer(scores, self_attn_mask=mask)
        return scores
"""


def test_a_mask_module_s_static_triangle_meets_a_fill_two_modules_down(found: Found) -> None:
    assert found(SONGNET_MASK_MODULE) == [(12, "MC503")]
    fixed = SONGNET_MASK_MODULE.replace("dtype=torch.bool))\n", "dtype=torch.bool), 1)\n")
    assert fixed != SONGNET_MASK_MODULE
    assert found(fixed) == []


def test_the_static_helper_is_read_through_its_class_as_through_self(found: Found) -> None:
    through_self = SONGNET_MASK_MODULE.replace("SelfAttentionMask.get_mask", "self.get_mask")
    assert found(through_self) == [(12, "MC503")]


def test_a_keep_triangle_handed_down_and_inverted_at_the_fill_is_not_checked_there(
        found: Found) -> None:
    # filled where `~mask`: the mask is read as a keep-mask there, so the diagonal of a triu is
    # not the question (its direction is, and that is reported where the mask is made)
    kept = SONGNET_MASK_MODULE.replace(
        "masked_fill(attn_mask.unsqueeze(0)", "masked_fill(~attn_mask.unsqueeze(0)")
    assert (12, "MC503") not in found(kept)


def test_a_diagonal_zero_triangle_empties_the_first_row_after_two_modules() -> None:
    hidden = torch.triu(torch.ones(3, 3, dtype=torch.bool))
    weights = torch.zeros(2, 3, 3).masked_fill(hidden.unsqueeze(0), float("-inf")).softmax(-1)
    assert weights[:, 0].isnan().all()
    assert not weights[:, 1:].isnan().any()


# Held-out 46's indoor positioning collator: a bool `zeros` with True written over each row's
# real positions, returned under the tokenizer's key, then handed as it is to torch's
# key-padding mask (True = padding).
PREFIX_WRITTEN_COLLATOR = """\
import torch
import torch.nn as nn


def collate_fn(samples):
    b, n = len(samples), max(len(s) for s in samples)
    ids = torch.zeros(b, n, dtype=torch.long)
    attention_mask = torch.zeros(b, n, dtype=torch.bool)
    for i, s in enumerate(samples):
        ids[i, :len(s)] = s
        attention_mask[i, :len(s)] = True
    return {"ids": ids, "attention_mask": attention_mask}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, batch):
        attention_mask = batch["attention_mask"]
        return self.encoder(self.embed(batch["ids"]), src_key_padding_mask=attention_mask)
"""


def test_a_collator_s_prefix_written_mask_is_a_keep_mask(found: Found) -> None:
    line = PREFIX_WRITTEN_COLLATOR.splitlines().index(
        "        return self.encoder(self.embed(batch[\"ids\"]), "
        "src_key_padding_mask=attention_mask)") + 1
    assert found(PREFIX_WRITTEN_COLLATOR) == [(line, "MC502")]
    inverted = PREFIX_WRITTEN_COLLATOR.replace(
        "src_key_padding_mask=attention_mask", "src_key_padding_mask=~attention_mask")
    assert found(inverted) == []


def test_a_row_length_bound_with_an_annotation_is_a_length(found: Found) -> None:
    # (the surroundings benchmark's annotated rewrite: `n: "torch.Tensor" = len(s)`)
    annotated = PREFIX_WRITTEN_COLLATOR.replace(
        "        attention_mask[i, :len(s)] = True",
        "        n: int = len(s)\n        attention_mask[i, :n] = True")
    assert annotated != PREFIX_WRITTEN_COLLATOR
    assert [code for _, code in found(annotated)] == ["MC502"]


def test_a_suffix_written_mask_is_no_keep_mask(found: Found) -> None:
    # True written after each row's real positions: a padding mask, as the encoder reads it
    padding = PREFIX_WRITTEN_COLLATOR.replace(
        "attention_mask[i, :len(s)] = True", "attention_mask[i, len(s):] = True")
    assert found(padding) == []


def test_only_a_row_s_length_makes_a_prefix_its_real_tokens(found: Found) -> None:
    # stanza's tree stack pads on the left and writes True over the padding at the front
    # (`mask[i, :max_len - positions[i]] = True`); Emformer hides the memory columns from one
    # query row (`mask[-1, :mems.size(0)] = True`): True is the masked part in both
    for written in ("attention_mask[i, :n - len(s)] = True",
                    "attention_mask[i, :pad_len] = True",
                    "attention_mask[-1, :len(s)] = True",
                    "attention_mask[i, :s.size(0)] = True"):
        assert found(PREFIX_WRITTEN_COLLATOR.replace(
            "attention_mask[i, :len(s)] = True", written)) == [], written
    for written in ("attention_mask[i, :lengths[i]] = True",
                    "attention_mask[i][:len(s)] = True"):
        source = PREFIX_WRITTEN_COLLATOR.replace(
            "attention_mask[i, :len(s)] = True", written).replace(
            "    for i, s in enumerate(samples):\n",
            "    lengths = [len(s) for s in samples]\n    for i, s in enumerate(samples):\n")
        assert [code for _, code in found(source)] == ["MC502"], written


def test_a_prefix_written_mask_as_a_key_padding_mask_hides_the_real_tokens() -> None:
    keep = torch.zeros(1, 3, dtype=torch.bool)
    keep[0, :2] = True
    attention = torch.nn.MultiheadAttention(4, 1, batch_first=True).eval()
    x = torch.randn(1, 3, 4)
    _, weights = attention(x, x, x, key_padding_mask=keep)
    # every query attends to the one padded position only
    assert weights[0, :, :2].eq(0).all() and torch.allclose(weights[0, :, 2], torch.ones(3))


# Held-out 46's Anomaly Transformer: an additive bias made in a dataset's __getitem__, batched
# by the DataLoader's default collate, handed down THUML's layout (`Encoder([EncoderLayer(
# AttentionLayer(AnomalyAttention(...))) for ...])`) to a product with the scores. Reported once,
# at the product.
THUML_LAYERS = """\
import torch
import torch.nn as nn


class Windows(torch.utils.data.Dataset):
    def __init__(self, data, gaps):
        self.data, self.gaps = data, gaps

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        bias = torch.zeros(self.data.shape[1]).masked_fill(self.gaps[index], float("-inf"))
        return self.data[index], bias


class InnerAttention(nn.Module):
    def forward(self, scores, bias=None):
        if bias is not None:
            scores = scores * bias[:, None, :]
        return scores.softmax(-1)


class AttentionLayer(nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.inner_attention = attention

    def forward(self, x, bias=None):
        return self.inner_attention(x @ x.transpose(1, 2), bias)


class EncoderLayer(nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def forward(self, x, bias=None):
        return self.attention(x, bias) @ x


class Encoder(nn.Module):
    def __init__(self, attn_layers):
        super().__init__()
        self.attn_layers = nn.ModuleList(attn_layers)

    def forward(self, x, bias=None):
        for attn_layer in self.attn_layers:
            x = attn_layer(x, bias=bias)
        return x


class Model(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.encoder = Encoder([EncoderLayer(AttentionLayer(InnerAttention()))
                                for _ in range(layers)])

    def forward(self, x, bias=None):
        return self.encoder(x, bias=bias)


if __name__ == "__main__":
    data = torch.randn(8, 5, 4)
    loader = torch.utils.data.DataLoader(Windows(data, torch.rand(8, 5) < 0.2), batch_size=4)
    model = Model(2)
    for x, bias in loader:
        model(x, bias)
"""


def test_a_dataset_s_bias_multiplied_down_the_layers_is_reported_at_the_product(
        found: Found) -> None:
    line = THUML_LAYERS.splitlines().index("            scores = scores * bias[:, None, :]") + 1
    assert found(THUML_LAYERS) == [(line, "MC523")]
    added = THUML_LAYERS.replace("scores = scores * bias", "scores = scores + bias")
    assert found(added) == []


def test_a_dataset_s_float_keep_mask_multiplied_into_the_scores_is_mc520(found: Found) -> None:
    # a 0/1 keep-mask from __getitem__ multiplied in: the masked scores become 0, not -inf
    keep = THUML_LAYERS.replace(
        'torch.zeros(self.data.shape[1]).masked_fill(self.gaps[index], float("-inf"))',
        "(~self.gaps[index]).float()")
    assert keep != THUML_LAYERS
    line = THUML_LAYERS.splitlines().index("            scores = scores * bias[:, None, :]") + 1
    assert found(keep) == [(line, "MC520")]
    # a dataset class that is not this file's: its items are not known, nothing is reported
    foreign = keep.replace("loader = torch.utils.data.DataLoader(Windows(", (
        "loader = torch.utils.data.DataLoader(other.Windows("))
    assert found(foreign) == []


def test_multiplying_by_an_additive_bias_zeroes_the_kept_scores() -> None:
    bias = torch.zeros(1, 3).masked_fill(torch.tensor([[False, False, True]]), float("-inf"))
    scores = torch.tensor([[2.0, 1.0, 0.5]])
    product = scores * bias
    assert product[0, :2].eq(0).all() and product[0, 2] == float("-inf")


# Held-out 47's MentalBERT: a BertModel whose `attention_mask` defaults to
# `torch.ones_like(input_ids)`, the token ids' (batch, seq) axes, handed down as it is (cast to
# bool) to SDPA's attn_mask, which reads a 2-D mask as (queries, keys). The default used to
# stand for the callers' mask without those axes.
ONES_LIKE_IDS_DEFAULT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def forward(self, q, attention_mask=None):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=attention_mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.attn = SelfAttention()

    def forward(self, input_ids, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        q = self.embed(input_ids)[:, None]
        return self.attn(q, attention_mask.bool())
"""


def test_a_mask_defaulting_to_ones_like_the_ids_is_a_batch_seq_mask(found: Found) -> None:
    # reported at the argument: the attention takes its mask straight to SDPA, so the caller
    # passes the wrong axes (as for any mask of known axes, `_padding_as_attn_mask_passed`)
    line = ONES_LIKE_IDS_DEFAULT.splitlines().index(
        "        return self.attn(q, attention_mask.bool())") + 1
    assert found(ONES_LIKE_IDS_DEFAULT) == [(line, "MC515")]
    # the default no longer hides the axes the `(input_ids, attention_mask)` pair gives the
    # parameter: with or without it, the same finding
    no_default = ONES_LIKE_IDS_DEFAULT.replace(
        "        if attention_mask is None:\n            attention_mask = torch.ones_like("
        "input_ids)\n", "")
    assert no_default != ONES_LIKE_IDS_DEFAULT
    assert found(no_default) == [(line - 2, "MC515")]
    axes = ONES_LIKE_IDS_DEFAULT.replace(
        "attention_mask.bool())", "attention_mask[:, None, None, :].bool())")
    assert found(axes) == []


def test_sdpa_reads_a_batch_seq_mask_as_queries_by_keys() -> None:
    q = torch.randn(3, 1, 3, 4)
    keep = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]]).bool()
    per_query = F_sdpa(q, keep)
    per_sequence = F_sdpa(q, keep[:, None, None, :])
    assert not torch.allclose(per_query, per_sequence)


def F_sdpa(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
