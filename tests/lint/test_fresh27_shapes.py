"""Shapes from fresh27's first reading (real code nobody here wrote) that gave false alarms,
each next to the variant that must still be reported, and the fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# opensportslib's chunk labelling: numpy arithmetic in a file that also imports torch.
NUMPY_ONE_MINUS_BOOL = """\
import numpy as np
import torch


def negatives(labels, lo, hi):
    z = np.zeros(labels.shape)
    for i in np.arange(labels.shape[1]):
        z[:, i] = 1 - np.logical_or(labels[:, i] >= hi, labels[:, i] <= lo)
    either = np.logical_or(labels[:, 0] >= hi, labels[:, 0] <= lo)
    first = 1 - either
    return torch.tensor(z), first
"""


def test_numpy_subtracts_a_bool_array_and_torch_does_not() -> None:
    assert (1 - np.logical_or(np.array([1, 0]), np.array([0, 0]))).tolist() == [0, 1]
    with pytest.raises(RuntimeError, match="Subtraction"):
        _ = 1 - torch.logical_or(torch.tensor([1, 0]), torch.tensor([0, 0]))


def test_one_minus_a_numpy_bool_array_is_not_reported(found: Found) -> None:
    assert found(NUMPY_ONE_MINUS_BOOL) == []


def test_the_same_in_torch_is_reported(found: Found) -> None:
    in_torch = NUMPY_ONE_MINUS_BOOL.replace("np.logical_or(", "torch.logical_or(")
    assert found(in_torch) == [(8, "MC512"), (10, "MC512")]
