"""Shapes met while measuring on fresh20 and the whole precision corpus: a dataclass field
annotated with a jaxtyping dtype (`Int32[Tensor, "depth n"]`, chai-lab's MSA context) has that
dtype in the class's methods; `None if a else None` is read (it stopped a file's walk with an
internal error). Each source next to what it must give."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

MSA = """\
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Int32
from torch import Tensor

NO_PAIRING_KEY = -999991


@dataclass
class MSAContext:
    pairing_key_hash: Int32[Tensor, "msa_depth n_tokens"]
    mask: Bool[Tensor, "msa_depth n_tokens"]

    def apply_mask(self, mask: Bool[Tensor, "msa_depth n_tokens"]) -> "MSAContext":
        return MSAContext(
            pairing_key_hash=self.pairing_key_hash.masked_fill(~mask, NO_PAIRING_KEY),
            mask=self.mask.masked_fill(~mask, False),
        )
"""


def test_an_int32_tensor_holds_the_sentinel() -> None:
    hashes = torch.zeros(2, 3, dtype=torch.int32)
    filled = hashes.masked_fill(torch.ones(2, 3, dtype=torch.bool), -999991)
    assert filled.dtype == torch.int32 and int(filled.min()) == -999991
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, 3, dtype=torch.float16).masked_fill(torch.ones(2, 3, dtype=torch.bool),
                                                            -999991)


def test_a_jaxtyping_int_field_is_no_float16_tensor(found: Found) -> None:
    assert found(MSA) == []
    # a field annotated as float16 scores is one
    half = MSA.replace("Int32[Tensor", "Float16[Tensor").replace("Bool, Int32", "Bool, Float16")
    assert found(half) == [(17, "MC501")]
    # and a field the annotation leaves open is read as before
    unknown = MSA.replace('pairing_key_hash: Int32[Tensor, "msa_depth n_tokens"]',
                          "pairing_key_hash: Tensor")
    assert found(unknown) == [(17, "MC501")]


def test_a_conditional_of_two_nones_is_read(found: Found) -> None:
    # `x = None if a else None` (both branches None): nothing is known, and nothing breaks
    source = ("import torch\n\n\ndef attend(scores, causal):\n"
              "    bias = None if causal else None\n"
              "    return scores.softmax(-1) if bias is None else (scores + bias).softmax(-1)\n")
    assert found(source) == []
