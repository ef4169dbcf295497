"""Held-out 45's triangle built wrong in a builder's first line (the tutorial's
`generate_square_subsequent_mask` without its transpose), and fresh36's false MC515 on a file's
own class named like torch's `TransformerEncoderLayer`: the bad source next to the finding it
must give, its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

SUBSEQUENT_MASK_WITHOUT_TRANSPOSE = """\
import torch


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones(sz, sz)) == 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)
    return mask
"""

# The use reads the mask the wrong way round, the triangle is the tutorial's: the use is wrong.
SUBSEQUENT_MASK_FILLED_THE_WRONG_WAY = """\
import torch


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 1, float("-inf")).masked_fill(mask == 0, 0.0)
    return mask
"""

OWN_ENCODER_LAYER = """\
import torch
import torch.nn as nn


class TransformerEncoderLayer(nn.Module):
    def __init__(self, n_heads, dim, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, tensor, mask):
        scores = tensor @ tensor.transpose(1, 2)
        scores = scores.masked_fill(~mask[:, None, :], -1e4)
        return scores.softmax(-1) @ tensor


class TransformerEncoder(nn.Module):
    def __init__(self, n_heads, n_layers, dim, dropout=0.0):
        super().__init__()
        self.n_layers = n_layers
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(TransformerEncoderLayer(n_heads, dim, dropout=dropout))

    def forward(self, input):
        mask = input != self.padding_idx
        tensor = input.float()
        for i in range(self.n_layers):
            tensor = self.layers[i](tensor, mask)
        return tensor
"""


def test_the_tutorial_mask_without_its_transpose_shows_the_future() -> None:
    mask = torch.triu(torch.ones(3, 3)) == 1
    additive = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)
    assert additive[0, 2] == 0 and additive[2, 0] == float("-inf")  # query 0 sees key 2


def test_a_keep_triangle_built_upside_down_is_reported_where_it_is_built(found: Found) -> None:
    assert found(SUBSEQUENT_MASK_WITHOUT_TRANSPOSE) == [(5, "MC521")]
    fixed = SUBSEQUENT_MASK_WITHOUT_TRANSPOSE.replace("== 1)\n", "== 1).transpose(0, 1)\n")
    assert found(fixed) == []


def test_a_right_triangle_filled_the_wrong_way_is_reported_at_the_fill(found: Found) -> None:
    assert found(SUBSEQUENT_MASK_FILLED_THE_WRONG_WAY) == [(6, "MC521")]


def test_torch_encoder_layer_reads_its_second_argument_as_src_mask() -> None:
    layer = torch.nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0, batch_first=True)
    padding = torch.tensor([[True, True, False]])  # (batch, seq): not an (L, S) src_mask
    try:
        layer(torch.randn(1, 3, 4), padding)
    except RuntimeError as err:
        assert "attn_mask" in str(err) or "shape" in str(err)
    else:  # pragma: no cover - torch 2.13 raises
        raise AssertionError("a (batch, seq) src_mask was accepted")


def test_a_file_s_own_encoder_layer_is_not_torch_s(found: Found) -> None:
    assert found(OWN_ENCODER_LAYER) == []
    # without the file's own class the name is torch's, whose second argument is src_mask
    start = OWN_ENCODER_LAYER.index("class TransformerEncoderLayer(")
    end = OWN_ENCODER_LAYER.index("class TransformerEncoder(")
    torch_layer = OWN_ENCODER_LAYER[:start] + OWN_ENCODER_LAYER[end:]
    call = torch_layer.splitlines().index("            tensor = self.layers[i](tensor, mask)")
    assert found(torch_layer) == [(call + 1, "MC515")]


# SongNet's mask module, one hop short of held-out 45's: an nn.Module whose forward returns a
# slice of the bool triangle its __init__ built, called as `self.attn_mask(n)`.
MASK_MODULE = """\
import torch
import torch.nn as nn


def get_mask(size):
    return torch.triu(torch.ones((size, size), dtype=torch.bool))


class SelfAttentionMask(nn.Module):
    def __init__(self, init_size=100):
        super().__init__()
        self.weights = get_mask(init_size)

    def forward(self, size):
        return self.weights[:size, :size].detach()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_mask = SelfAttentionMask()

    def forward(self, scores):
        m = self.attn_mask(scores.size(-1))
        return scores.masked_fill(m, float("-inf")).softmax(-1)
"""


def test_a_triangle_from_a_mask_module_meets_its_fill(found: Found) -> None:
    assert found(MASK_MODULE) == [(6, "MC503")]
    assert found(MASK_MODULE.replace("dtype=torch.bool))", "dtype=torch.bool), 1)")) == []


def test_a_diagonal_zero_triangle_empties_the_first_row() -> None:
    future = torch.triu(torch.ones(3, 3, dtype=torch.bool))
    weights = torch.zeros(3, 3).masked_fill(future, float("-inf")).softmax(-1)
    assert weights[0].isnan().all()


def test_the_built_triangle_is_found_as_well_when_annotated(found: Found) -> None:
    annotated = SUBSEQUENT_MASK_WITHOUT_TRANSPOSE.replace(
        "    mask = (torch.triu", '    mask: "torch.Tensor" = (torch.triu')
    assert found(annotated) == [(5, "MC521")]
