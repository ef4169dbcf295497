"""The shapes of held-out 30 (structured masks for packed and mixed sequences) that its first
reading missed, each bad source next to the findings it must give, its correct form next to
none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# A collate function returning a dict of int64 tensors, spread into the model; the model hands
# a slice of its mask, bound to a name, to a method that prepends memory tokens and inverts it.
MEMORY_TOKENS = """\
import torch
import torch.nn as nn


def collate(docs):
    t = max(map(len, docs))
    return {"input_ids": torch.tensor([d + [0] * (t - len(d)) for d in docs], dtype=torch.long),
            "attention_mask": torch.tensor([[1] * len(d) + [0] * (t - len(d)) for d in docs],
                                           dtype=torch.long)}


class Reader(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def read_segment(self, h, seg_mask):
        full_mask = torch.cat([seg_mask.new_ones(h.shape[0], 2), seg_mask], dim=1)
        key_padding_mask = ~full_mask
        return self.attn(h, h, h, key_padding_mask=key_padding_mask.to(torch.bool))[0]

    def forward(self, input_ids, attention_mask):
        h = torch.randn(input_ids.shape[0], 6, 8)
        seg_mask = attention_mask[:, 0:4]
        return self.read_segment(h, seg_mask)


def run(docs):
    model = Reader()
    batch = collate(docs)
    return model(**batch)
"""


def test_bitwise_not_of_an_int64_mask_is_never_zero() -> None:
    keep = torch.tensor([[1, 1, 0]])
    assert (~keep).tolist() == [[-2, -2, -1]]  # every entry true: every key is padding
    assert (~keep).bool().all()


def test_an_int_mask_reaches_a_method_through_a_spread_dict_and_a_slice(found: Found) -> None:
    assert found(MEMORY_TOKENS) == [(19, "MC518")]
    fixed = MEMORY_TOKENS.replace("key_padding_mask = ~full_mask",
                                  "key_padding_mask = full_mask == 0")
    assert found(fixed) == []
    # a dict of other keys says nothing of the mask
    renamed = MEMORY_TOKENS.replace('"attention_mask": torch.tensor(', '"keep": torch.tensor(')
    assert found(renamed) == []


# Transformer-XL: keys and values of the previous segment's memory are prepended, and the
# attention keeps is_causal=True.
XL_MEMORY = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class MemoryAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q, self.kv = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim)

    def forward(self, x, mem=None):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, -1).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        if mem is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mk, mv = self.kv(mem).view(b, mem.shape[1], 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        k = torch.cat([mk, k], dim=2)
        v = torch.cat([mv, v], dim=2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
"""


def test_causal_flag_with_memory_keys_is_aligned_top_left() -> None:
    q = torch.randn(1, 1, 2, 4)
    k = torch.randn(1, 1, 5, 4)  # 3 memory keys, then the 2 new ones
    flagged = F.scaled_dot_product_attention(q, k, k, is_causal=True)
    first_only = F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], k[:, :, :1])
    # the first new query sees only the first memory key: top-left alignment
    assert torch.allclose(flagged[:, :, :1], first_only, atol=1e-6)


def test_memory_concatenated_before_the_keys_is_a_cache(found: Found) -> None:
    assert found(XL_MEMORY) == [(21, "MC510")]
    head, _ = XL_MEMORY.rsplit("        return", 1)
    explicit = head + (
        "        keep = torch.ones(t, k.shape[2], dtype=torch.bool).tril(k.shape[2] - t)\n"
        "        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)\n")
    assert found(explicit) == []
    # cross-attention to a memory (the keys are the memory itself, no flag): nothing
    cross = (head + "        return F.scaled_dot_product_attention(q, k, v)\n").replace(
        "k = torch.cat([mk, k], dim=2)", "k = mk").replace("v = torch.cat([mv, v], dim=2)",
                                                           "v = mv")
    assert found(cross) == []


# A vision tower handing its (batch, patches) padding mask on to its blocks' attn_mask.
HANDED_ON = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def forward(self, x, attn_mask=None):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=attn_mask)


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x, patch_keep):
        for blk in self.blocks:
            x = blk(x, attn_mask=patch_keep)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower = Tower()

    def forward(self, patches, counts):
        keep = torch.arange(patches.shape[1])[None, :] < counts[:, None]
        return self.tower(patches, keep)
"""


def test_a_padding_mask_handed_on_as_attn_mask_is_reported_at_the_hand_over(
        found: Found) -> None:
    assert found(HANDED_ON) == [(18, "MC515")]
    fixed = HANDED_ON.replace("x = blk(x, attn_mask=patch_keep)",
                              "x = blk(x, attn_mask=patch_keep[:, None, None, :])")
    assert found(fixed) == []


# Packed texts: a same-text mask AND-ed with a real-token mask on both axes, handed through two
# layers to a fill with -inf and a softmax.
PACKED = """\
import torch
import torch.nn as nn


class SegmentAttention(nn.Module):
    def forward(self, scores, mask):
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
        return scores.softmax(dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SegmentAttention()

    def forward(self, scores, mask):
        return self.attn(scores, mask)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, scores, seg):
        real = seg > 0
        same_text = seg[:, :, None] == seg[:, None, :]
        attn_mask = same_text & real[:, :, None] & real[:, None, :]
        for layer in self.layers:
            scores = layer(scores, attn_mask)
        return scores
"""


def test_a_padded_querys_row_of_a_pair_mask_is_nan() -> None:
    seg = torch.tensor([[1, 1, 0]])
    real = seg > 0
    pair = (seg[:, :, None] == seg[:, None, :]) & real[:, :, None] & real[:, None, :]
    weights = torch.zeros(1, 1, 3, 3).masked_fill(~pair[:, None], float("-inf")).softmax(-1)
    assert weights[0, 0, 2].isnan().all() and not weights[0, 0, 0].isnan().any()


def test_a_chain_of_factors_with_both_axes_is_a_pair_mask(found: Found) -> None:
    assert found(PACKED) == [(7, "MC507")]
    keys_only = PACKED.replace("same_text & real[:, :, None] & real[:, None, :]",
                               "same_text & real[:, None, :]")
    assert found(keys_only) == []
    finite = PACKED.replace('float("-inf")', "torch.finfo(scores.dtype).min")
    assert found(finite) == []


def test_the_function_forms_of_the_product_make_a_pair_mask(found: Found) -> None:
    source = """\
import torch


def attend(scores, keep):
    pair = torch.mul(keep[:, :, None], keep[:, None, :])
    return scores.masked_fill(pair[:, None] == 0, float("-inf")).softmax(-1)
"""
    assert found(source) == [(6, "MC507")]
    assert found(source.replace("torch.mul(keep[:, :, None], keep[:, None, :])",
                                "keep[:, :, None].logical_and(keep[:, None, :])")) == [
        (6, "MC507")]
    # both factors on the key axis: a key mask, no empty row
    assert found(source.replace("torch.mul(keep[:, :, None], keep[:, None, :])",
                                "torch.mul(keep[:, None, :], keep[:, None, :])")) == []
