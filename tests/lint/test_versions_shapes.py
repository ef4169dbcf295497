"""Shapes from older releases of the precision code bases (OpenNMT-py 2.3.0 and others)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]

# OpenNMT-py 2.3.0 onmt/translate/beam_search.py: beam-search log-probs start as a tensor of
# python floats (float32) and a finished beam is pushed down with -1e10 (fits float32).
BEAM = '''import torch


class BeamSearch:
    def initialize(self, beam_size, batch_size, device):
        self.topk_log_probs = torch.tensor(
            [0.0] + [float("-inf")] * (beam_size - 1), device=device
        ).repeat(batch_size).reshape(batch_size, beam_size)

    def update_finished(self):
        self.topk_log_probs.masked_fill_(self.is_finished, -1e10)
'''


def test_a_tensor_of_python_floats_is_float32(found: Found) -> None:
    assert found(BEAM) == []


@pytest.mark.parametrize("data", ["[0.0] + [float('-inf')] * 3", "[[0.5, 1], [2, 3]]",
                                  "(-1.0, 2.0)"])
def test_torch_makes_these_literals_float32(data: str) -> None:
    assert torch.tensor(eval(data)).dtype == torch.float32


@pytest.mark.parametrize("data", ["[x, 0.0]", "[0.0] + list(x)", "[0.0] * 3 + x"])
def test_a_literal_holding_a_name_is_not_read_as_float32(found: Found, data: str) -> None:
    # `x` may be a float16 tensor: the tensor's dtype is unknown and the fill stays reported
    source = ("import torch\n\n\ndef f(x, m):\n"
              f"    lp = torch.tensor({data})\n"
              "    return lp.masked_fill(m, -1e10)\n")
    assert found(source) == [(6, "MC501")]


def test_the_same_beam_in_half_is_reported(found: Found) -> None:
    assert found(BEAM.replace("device=device\n        )", "device=device\n        ).half()")) == [
        (11, "MC501")]
