"""The reach held-out 41's first reading lacked (super-resolution, extractive summarization,
drug-target interaction, temporal point processes): each bad source next to the findings it
must give, its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# SwinIR's shifted windows: the bool mask of `calculate_mask`, registered as a buffer, added
# to the scores in their (batch, windows, heads, n, n) layout.
SHIFTED_WINDOW_MASK_ADDED = """\
import torch
import torch.nn as nn


class WindowAttention(nn.Module):
    def forward(self, x, q, k, mask=None):
        attn = q @ k.transpose(-2, -1)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(x.shape[0] // nw, nw, 4, 16, 16) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, 4, 16, 16)
        return attn.softmax(-1)


class Block(nn.Module):
    def __init__(self, shift):
        super().__init__()
        self.attn = WindowAttention()
        self.register_buffer("attn_mask", self.calculate_mask() if shift else None)

    def calculate_mask(self):
        windows = torch.zeros(4, 16)
        return windows.unsqueeze(1) != windows.unsqueeze(2)

    def forward(self, x, q, k):
        return self.attn(x, q, k, mask=self.attn_mask)
"""


def test_a_bool_mask_added_in_another_layout_masks_nothing() -> None:
    scores = torch.zeros(1, 2, 1, 2, 2)
    hidden = torch.tensor([[[True, False], [False, True]]] * 2)
    added = (scores + hidden.unsqueeze(1).unsqueeze(0)).view(-1, 1, 2, 2).softmax(-1)
    assert added[0, 0, 0, 0] > 0.5  # the hidden key gets the larger weight


def test_a_bool_window_mask_added_to_reshaped_scores(found: Found) -> None:
    assert found(SHIFTED_WINDOW_MASK_ADDED) == [(10, "MC509")]
    fixed = SHIFTED_WINDOW_MASK_ADDED.replace(
        "attn.view(x.shape[0] // nw, nw, 4, 16, 16) + mask.unsqueeze(1).unsqueeze(0)",
        "attn.view(x.shape[0] // nw, nw, 4, 16, 16).masked_fill("
        "mask.unsqueeze(1).unsqueeze(0), -100.0)")
    assert found(fixed) == []


# PreSumm: the sentence mask is a bool attribute of a hand-written batch class, handed through
# the model to a layer that subtracts it from 1.
BATCH_ATTRIBUTE_SUBTRACTED = """\
import torch
import torch.nn as nn


class Layer(nn.Module):
    def forward(self, x, mask):
        return x.masked_fill(mask.unsqueeze(-1), 0.0)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Layer()

    def forward(self, top_vecs, mask):
        return self.layer(top_vecs, 1 - mask)


class Batch:
    def __init__(self, data):
        clss = torch.tensor(data)
        self.mask_cls = ~(clss == -1)
        self.clss = clss


def train(model, data):
    batch = Batch(data)
    return model(torch.zeros(2, 3, 4), batch.mask_cls)


train(Encoder(), [[0, 1, -1], [0, 1, 2]])
"""


def test_one_minus_a_bool_mask_raises() -> None:
    keep = torch.tensor([True, False])
    try:
        1 - keep
    except RuntimeError as error:
        assert "bool" in str(error)
    else:  # pragma: no cover - the fact the finding rests on
        raise AssertionError("1 - bool tensor did not raise")


def test_a_bool_attribute_of_a_batch_object_subtracted_from_one(found: Found) -> None:
    assert found(BATCH_ATTRIBUTE_SUBTRACTED) == [(16, "MC512")]
    assert found(BATCH_ATTRIBUTE_SUBTRACTED.replace("1 - mask", "~mask")) == []


def test_a_batch_attribute_another_method_rebinds_is_not_read(found: Found) -> None:
    rebound = BATCH_ATTRIBUTE_SUBTRACTED.replace(
        "        self.clss = clss\n",
        "        self.clss = clss\n\n    def to_float(self):\n"
        "        self.mask_cls = self.mask_cls.float()\n")
    assert found(rebound) == []


def test_a_module_subclass_attribute_is_not_an_instance_field(found: Found) -> None:
    # a class with a base may set its attributes anywhere (a module's forward, a parent's
    # __init__): only plain classes are read
    subclassed = BATCH_ATTRIBUTE_SUBTRACTED.replace("class Batch:", "class Batch(dict):")
    assert found(subclassed) == []


# TransformerCPI: one attention class used as `sa` with the atoms' pair mask and as `ea` with
# the protein's key mask; it fills -inf where the mask is 0.
PAIR_MASK_ON_ONE_OF_TWO_CALLS = """\
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def forward(self, query, key, mask=None):
        energy = query @ key.transpose(-2, -1)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(energy, dim=-1) @ key


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa = SelfAttention()
        self.ea = SelfAttention()

    def forward(self, trg, src, trg_mask, src_mask):
        trg = self.sa(trg, trg, trg_mask)
        return self.ea(trg, src, src_mask)


def make_masks(atom_num, protein_num, n, m):
    compound = torch.zeros(len(atom_num), n)
    protein = torch.zeros(len(atom_num), m)
    for i in range(len(atom_num)):
        compound[i, :atom_num[i]] = 1
        protein[i, :protein_num[i]] = 1
    pair = compound.unsqueeze(1).unsqueeze(3) * compound.unsqueeze(1).unsqueeze(2)
    return pair, protein.unsqueeze(1).unsqueeze(2)


def run(trg, src, atom_num, protein_num):
    layer = DecoderLayer()
    trg_mask, src_mask = make_masks(atom_num, protein_num, trg.shape[1], src.shape[1])
    return layer(trg, src, trg_mask, src_mask)
"""


def test_a_minus_inf_fill_of_a_pair_mask_gives_nan_rows() -> None:
    keep = torch.tensor([1.0, 0.0])
    pair = keep[:, None] * keep[None, :]
    weights = torch.zeros(2, 2).masked_fill(pair == 0, float("-inf")).softmax(-1)
    assert torch.isnan(weights[1]).all() and not torch.isnan(weights[0]).any()


def test_a_pair_mask_on_one_of_two_calls(found: Found) -> None:
    assert found(PAIR_MASK_ON_ONE_OF_TWO_CALLS) == [(9, "MC507")]
    fixed = PAIR_MASK_ON_ONE_OF_TWO_CALLS.replace(
        'float("-inf")', "torch.finfo(energy.dtype).min")
    assert found(fixed) == []


def test_key_masks_on_both_calls_are_not_pair_masks(found: Found) -> None:
    keys_only = PAIR_MASK_ON_ONE_OF_TWO_CALLS.replace(
        "compound.unsqueeze(1).unsqueeze(3) * compound.unsqueeze(1).unsqueeze(2)",
        "compound.unsqueeze(1).unsqueeze(2)")
    assert found(keys_only) == []


# THP (Transformer Hawkes Process): the padding mask OR-ed with the subsequent mask (True =
# hidden) handed down two layers to SDPA, which keeps where True.
CAUSAL_UNION_HANDED_TO_SDPA = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_attn_key_pad_mask(seq_k, seq_q):
    return seq_k.eq(0).unsqueeze(1).expand(-1, seq_q.size(1), -1)


def get_subsequent_mask(seq):
    n = seq.size(1)
    causal = torch.triu(torch.ones((n, n), dtype=torch.bool), diagonal=1)
    return causal.unsqueeze(0).expand(seq.size(0), -1, -1)


class MultiHeadAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.slf_attn = MultiHeadAttention()

    def forward(self, x, slf_attn_mask=None):
        return self.slf_attn(x, x, x, mask=slf_attn_mask)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_stack = nn.ModuleList([EncoderLayer() for _ in range(2)])

    def forward(self, x, event_type):
        union = get_attn_key_pad_mask(event_type, event_type) | get_subsequent_mask(event_type)
        for layer in self.layer_stack:
            x = layer(x, slf_attn_mask=union)
        return x
"""


def test_a_hidden_union_as_sdpa_attn_mask_shows_the_future() -> None:
    q = torch.randn(1, 1, 3, 4)
    hidden = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
    wrong = F.scaled_dot_product_attention(q, q, q, attn_mask=hidden)
    right = F.scaled_dot_product_attention(q, q, q, attn_mask=~hidden)
    assert torch.allclose(right[0, 0, 0], q[0, 0, 0])  # the first query sees only itself
    future = torch.softmax(q[0, 0, 0] @ q[0, 0, 1:].T / 2.0, -1) @ q[0, 0, 1:]
    assert torch.allclose(wrong[0, 0, 0], future, atol=1e-6)  # ... or only the future


def test_a_causal_union_handed_down_to_sdpa(found: Found) -> None:
    assert found(CAUSAL_UNION_HANDED_TO_SDPA) == [(20, "MC511")]
    fixed = CAUSAL_UNION_HANDED_TO_SDPA.replace("attn_mask=mask", "attn_mask=~mask")
    assert found(fixed) == []


def test_a_keep_union_handed_down_to_sdpa_is_right(found: Found) -> None:
    keep = CAUSAL_UNION_HANDED_TO_SDPA.replace("seq_k.eq(0)", "seq_k.ne(0)").replace(
        "diagonal=1)", "diagonal=0).transpose(0, 1)").replace(
        "get_attn_key_pad_mask(event_type, event_type) | ",
        "get_attn_key_pad_mask(event_type, event_type) & ")
    assert found(keep) == []
