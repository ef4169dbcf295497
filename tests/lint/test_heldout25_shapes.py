"""Spellings from held-out 25 (one bug in a long module crowded with correct mask code) and
from fresh17's real code: a mask inverted for one module's key_padding_mask and handed as it
is to the file's own module, which forwards it to nn.MultiheadAttention (DETR's decoder); a
0/1 mask filled from its own zeros with a large negative (GLIP's BiAttention), which is not
float16 work. Each bad source next to the findings it must give, its correct form next to
none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

DETR = """\
import torch
from torch import nn

class DecoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.cross_attn = nn.MultiheadAttention(d, 2)

    def forward(self, tgt, memory, key_padding_mask):
        return self.cross_attn(tgt, memory, memory, key_padding_mask=key_padding_mask)[0]

class Decoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d) for _ in range(2))

    def forward(self, tgt, memory, key_padding_mask):
        for layer in self.layers:
            tgt = layer(tgt, memory, key_padding_mask)
        return tgt

class Detector(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 2), 2)
        self.decoder = Decoder(d)

    def forward(self, src, tgt, attention_mask):
        attention_mask = attention_mask.flatten(1)
        key_padding_mask = ~attention_mask
        memory = self.encoder(src, src_key_padding_mask=key_padding_mask)
        return self.decoder(tgt, memory, key_padding_mask=attention_mask)
"""


def test_a_mask_inverted_for_one_module_and_not_for_the_next_is_reported(found: Found) -> None:
    assert found(DETR) == [(32, "MC502")]
    right = DETR.replace("key_padding_mask=attention_mask)", "key_padding_mask=key_padding_mask)")
    assert found(right) == []
    # rebound between the inversion and the call: another mask, whose convention is not known
    rebound = DETR.replace("        return self.decoder(",
                           "        attention_mask = attention_mask == 0\n"
                           "        return self.decoder(")
    assert found(rebound) == []
    # a store on the call's own line binds after the call reads the mask: still the same mask
    same_line = DETR.replace(
        "        return self.decoder(tgt, memory, key_padding_mask=attention_mask)\n",
        "        attention_mask = self.decoder(tgt, memory, key_padding_mask=attention_mask)\n"
        "        return attention_mask\n")
    assert found(same_line) == [(32, "MC502")]
    # the same keyword inverted in one call and not in the other, on torch's module directly
    direct = DETR.replace("self.decoder = Decoder(d)", "self.cross = nn.MultiheadAttention(d, 2)")
    direct = direct.replace("self.decoder(tgt, memory, key_padding_mask=attention_mask)",
                            "self.cross(tgt, memory, memory, key_padding_mask=attention_mask)[0]")
    assert found(direct) == [(32, "MC502")]


def test_a_keep_mask_as_key_padding_mask_attends_to_the_padding_only() -> None:
    """nn.MultiheadAttention's key_padding_mask is True = padding: handed the keep-mask, each
    query of a sequence with one padded key attends to that key alone."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(4, 1, batch_first=True).eval()
    x = torch.randn(1, 3, 4)
    keep = torch.tensor([[True, True, False]])
    _, right = attention(x, x, x, key_padding_mask=~keep)
    _, wrong = attention(x, x, x, key_padding_mask=keep)
    assert torch.all(right[0, :, 2] == 0)
    assert torch.allclose(wrong[0, :, 2], torch.ones(3))


GLIP = """\
import torch

class BiAttention(torch.nn.Module):
    def forward(self, scores, attention_mask):
        attention_mask = attention_mask.masked_fill(attention_mask == 0, -9e15)
        return (scores + attention_mask[:, None, None, :]).softmax(-1)
"""


def test_a_mask_filled_from_its_own_zeros_is_not_float16_work(found: Found) -> None:
    assert found(GLIP) == []
    # the file itself runs in float16: the mask may be half there, and the fill would raise
    half = GLIP + "\nmodel = BiAttention().half()\n"
    assert found(half) == [(5, "MC501")]
    # scores filled where a mask is 0: the scores' dtype is the model's
    scores = GLIP.replace("attention_mask = attention_mask.masked_fill(",
                          "scores = scores.masked_fill(")
    assert found(scores) == [(5, "MC501")]


def test_an_int64_mask_holds_minus_9e15_and_a_float16_one_raises() -> None:
    """Why the 0/1 mask's own dtype decides: a tokenizer's int64 mask takes -9e15 (and added
    to float16 scores rounds to -inf, which masks); only a float16 mask raises."""
    ids_mask = torch.tensor([[1, 1, 0]])
    filled = ids_mask.masked_fill(ids_mask == 0, -9e15)
    assert filled.dtype == torch.int64 and filled[0, 2].item() == -9_000_000_000_000_000
    half = ids_mask.half()
    try:
        half.masked_fill(half == 0, -9e15)
    except RuntimeError as error:
        assert "overflow" in str(error)
    else:
        raise AssertionError("a float16 masked_fill of -9e15 did not raise")
