"""The shapes of held-out 28 (inference and generation code) that the first reading missed,
each bad source next to the findings it must give, its correct form next to none, and the
torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

RERANKER = """\
import torch.nn.functional as F

class EncoderLayer:
    def forward(self, q, k, v, attention_mask):
        attn_mask = (attention_mask == 0)[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
"""


def test_sdpa_bool_mask_keeps_where_true() -> None:
    q = torch.randn(2, 1, 3, 4)
    keep = torch.tensor([[1, 1, 1], [1, 1, 0]])
    padded = F.scaled_dot_product_attention(q, q, q, attn_mask=(keep == 0)[:, None, None, :])
    right = F.scaled_dot_product_attention(q, q, q, attn_mask=(keep == 1)[:, None, None, :])
    # the first sequence has no padding: True nowhere, every row masked (zeros on torch 2.13's
    # CPU path); the second attends only to its padded key
    assert torch.equal(padded[0], torch.zeros_like(padded[0]))
    assert torch.allclose(padded[1], q[1, :, 2:3].expand(1, 3, 4))
    assert not torch.allclose(right[1], padded[1])


def test_zero_test_of_an_extended_hf_mask_is_padding(found: Found) -> None:
    assert found(RERANKER) == [(6, "MC511")]
    assert found(RERANKER.replace("attention_mask == 0", "attention_mask == 1")) == []
    assert found(RERANKER.replace("(attention_mask == 0)", "attention_mask.eq(0)")) == [
        (6, "MC511")]


def test_zero_test_of_an_additive_or_rebound_mask_is_not_read(found: Found) -> None:
    # a 4-D additive mask tested against 0 is True at the kept keys (diffusers' ACE-Step):
    # without the 2-D extension the name says nothing of its values
    four_d = RERANKER.replace("(attention_mask == 0)[:, None, None, :]", "attention_mask == 0")
    assert found(four_d) == []
    cast = "        attention_mask = attention_mask.float()\n"
    rebound = RERANKER.replace("        attn_mask =", cast + "        attn_mask =")
    assert found(rebound) == []


STREAMING = """\
import torch

def make_masks(lengths, max_len, chunk):
    idx = torch.arange(max_len)
    chunk_id = idx // chunk
    ahead = chunk_id[None, :] > chunk_id[:, None]
    valid = idx[None, :] < lengths[:, None]
    return ahead, valid

class ChunkSelfAttention(torch.nn.Module):
    def forward(self, scores, masks):
        chunk_blocked, valid = masks
        neg = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(chunk_blocked, neg)
        scores = scores.masked_fill(~valid[:, None, :, None], neg)
        return scores.softmax(-1)

class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(ChunkSelfAttention() for _ in range(2))

    def forward(self, scores, lengths):
        masks = make_masks(lengths, scores.shape[-1], 4)
        for layer in self.layers:
            scores = layer(scores, masks)
        return scores, masks[1]
"""


def test_query_axis_fill_leaves_padded_keys_visible() -> None:
    scores = torch.randn(2, 1, 3, 3)
    valid = torch.tensor([[True, True, True], [True, True, False]])
    rows = scores.masked_fill(~valid[:, None, :, None], -1e9).softmax(-1)
    keys = scores.masked_fill(~valid[:, None, None, :], -1e9).softmax(-1)
    assert rows[1, 0, 0, 2] > 0.01 and keys[1, 0, 0, 2] == 0


def test_a_tuple_of_masks_passed_whole_keeps_its_positions(found: Found) -> None:
    assert found(STREAMING) == [(15, "MC514")]
    assert found(STREAMING.replace("~valid[:, None, :, None]", "~valid[:, None, None, :]")) == []
    # read by index, in the callee
    callee = STREAMING.replace("chunk_blocked, valid = masks",
                               "chunk_blocked = masks[0]\n        valid = masks[1]")
    assert found(callee) == [(16, "MC514")]
    # read by index where the tuple was bound
    indexed = STREAMING.replace("        return scores, masks[1]",
                                "        valid = masks[1]\n"
                                "        return scores.masked_fill(~valid[:, None, :, None], -1e4)")
    assert found(indexed) == [(15, "MC514"), (28, "MC514")]


PREFIX_LM = """\
import torch
import torch.nn as nn

def prefix_lm_mask(n, prefix):
    i = torch.arange(n)
    causal = i[None, :] <= i[:, None]
    both_in_prefix = (i[:, None] < prefix) & (i[None, :] < prefix)
    return (causal | both_in_prefix)[None, None]

class EagerAttention(nn.Module):
    def forward(self, hidden, attention_mask=None, output_attentions=False):
        attn_weights = hidden @ hidden.transpose(-2, -1)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        return attn_weights.softmax(dim=-1)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = EagerAttention()

    def forward(self, x, **kwargs):
        return self.attn(x, **kwargs)

class PrefixLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x, prefix_len):
        layer_kwargs = {"attention_mask": prefix_lm_mask(x.shape[1], prefix_len)}
        for block in self.blocks:
            x = block(x, **layer_kwargs)
        return x
"""


def test_bool_mask_added_to_scores_adds_one() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[True, True, False]])
    assert torch.equal(scores + keep, torch.tensor([[1.0, 1.0, 0.0]]))


def test_a_keyword_dict_forwarded_through_kwargs_reaches_the_addition(found: Found) -> None:
    assert found(PREFIX_LM) == [(14, "MC509")]
    additive = PREFIX_LM.replace(
        "return (causal | both_in_prefix)[None, None]",
        "keep = (causal | both_in_prefix)[None, None]\n"
        "    return torch.zeros(keep.shape).masked_fill(~keep, float('-inf'))")
    assert found(additive) == []
    # the layer's own keyword decides: a wrapper that names attention_mask itself
    wrapper = "def forward(self, x, **kwargs):\n        return self.attn(x, **kwargs)"
    named = PREFIX_LM.replace(wrapper, "def forward(self, x, attention_mask=None, **kwargs):\n"
                              "        return self.attn(x, attention_mask=attention_mask, **kw"
                              "args)")
    assert found(named) == [(14, "MC509")]


PAST_KV = """\
import torch
import torch.nn as nn

class Attention(nn.Module):
    def forward(self, scores, attention_mask):
        neg = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(attention_mask[:, None, None, :].bool(), neg)
        return scores.softmax(-1)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.ModuleList(Attention() for _ in range(2))

    def forward(self, scores, attention_mask=None):
        for attn in self.attn:
            scores = attn(scores, attention_mask)
        return scores

def generate(model, scores, attention_mask):
    return model(scores, attention_mask)

def left_pad(ids):
    return ids, (ids != 0).long()

if __name__ == "__main__":
    model = Model().eval()
    ids, mask = left_pad(torch.tensor([[0, 5, 6]]))
    scores = torch.randn(1, 1, 3, 3)
    generate(model, scores, mask)
    model(scores, mask)
"""


def test_a_use_reported_by_its_name_is_not_reported_again_at_the_calls(found: Found) -> None:
    # the fill reads `attention_mask` (1 = real token) as True = masked: one finding, where
    # it is read; the calls that pass a keep-mask are the same bug
    assert found(PAST_KV) == [(7, "MC519")]
    fixed = PAST_KV.replace("attention_mask[:, None, None, :].bool()",
                            "attention_mask[:, None, None, :] == 0")
    assert found(fixed) == []
    # a parameter named for padding: the calls that pass a keep-mask are the findings
    renamed = PAST_KV.replace("attention_mask", "pad")
    assert found(renamed) == [(30, "MC519"), (31, "MC519")]
    # a parameter named for neither, which every call gives a keep-mask: one finding, at the
    # fill (the helper reads its one kind of mask the wrong way round)
    neutral = PAST_KV.replace("attention_mask", "bits")
    assert found(neutral) == [(7, "MC519")]
    # ... and where another call gives it a padding mask, the calls that pass a keep-mask
    mixed = neutral.replace("    model(scores, mask)\n",
                            "    model(scores, mask)\n    model(scores, mask == 0)\n")
    assert found(mixed) == [(30, "MC519"), (31, "MC519")]
