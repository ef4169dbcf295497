"""A class spelled as one of torch's attention modules but imported from another library is not
torch's (hanlp's `TransformerEncoder` wraps a Hugging Face model and takes the tokenizer's mask
second): its arguments are not read as nn.TransformerEncoder's."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

ENCODER = """\
from torch import nn
IMPORT


class Model(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.encoder = ENCODER(layer, 2)

    def forward(self, input_ids):
        attention_mask = input_ids != 0
        return self.encoder(input_ids, attention_mask)
"""


def test_torch_transformer_encoder_takes_its_attn_mask_second() -> None:
    parameters = list(inspect.signature(torch.nn.TransformerEncoder.forward).parameters)
    assert parameters[1:3] == ["src", "mask"]


def test_torch_transformer_encoder_gets_the_padding_mask_as_attn_mask(found: Found) -> None:
    for imported, called in (("from torch.nn import TransformerEncoder", "TransformerEncoder"),
                             ("import torch", "nn.TransformerEncoder"),
                             ("import torch", "torch.nn.TransformerEncoder")):
        source = ENCODER.replace("IMPORT", imported).replace("ENCODER", called)
        assert found(source) == [(12, "MC515")], called


def test_a_transformer_encoder_of_another_library_is_not_torch_s(found: Found) -> None:
    for imported, called in (
            ("from hanlp.layers.transformers.encoder import TransformerEncoder",
             "TransformerEncoder"),
            ("from mylib import TransformerEncoder as Encoder", "Encoder"),
            ("import mylib.layers as layers", "layers.TransformerEncoder")):
        source = ENCODER.replace("IMPORT", imported).replace("ENCODER", called)
        assert found(source) == [], called
