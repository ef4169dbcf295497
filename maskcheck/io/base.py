"""What every loader hands to the analysis: tensors read lazily, in row blocks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class TensorSource(Protocol):
    """A tensor the analysis can stream.

    The tensor is seen as a 2-D matrix of ``rows`` x ``cols``: ``cols`` is the last axis
    (keys), ``rows`` the product of all others (a 0-dim tensor is 1 x 1, a 1-D one 1 x S).
    ``read_rows`` returns a numpy array of shape (stop - start, cols): bool stays bool,
    integers keep their numpy type, float16/32/64 stay, bfloat16 and float8 are widened
    exactly to float32. ``dtype`` is always the original dtype's torch-style name.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    def read_rows(self, start: int, stop: int) -> np.ndarray: ...


def rows_cols(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def element_size(dtype: str) -> int:
    return {
        "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
        "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
        "int32": 4, "uint32": 4, "float32": 4,
        "int64": 8, "uint64": 8, "float64": 8,
    }[dtype]


NUMPY_TO_NAME: dict[str, str] = {
    "bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
}


@dataclass
class ArraySource:
    """An in-memory numpy array (already widened) posing as a TensorSource."""

    name: str
    array: np.ndarray
    dtype: str = ""
    shape: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.array.shape)
        if not self.dtype:
            self.dtype = NUMPY_TO_NAME[self.array.dtype.name]
        rows, cols = rows_cols(self.shape)
        self._flat = self.array.reshape(rows, cols)

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        return self._flat[start:stop]


@dataclass
class LoadedFile:
    """One opened file: its tensors (lazy), metadata, and problems met per tensor."""

    path: str
    tensors: list[TensorSource] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    # (tensor name, one-line problem) for tensors that could not be read; the file's other
    # tensors are still analysed.
    tensor_errors: list[tuple[str, str]] = field(default_factory=list)
    # (name, why) of entries that were skipped on purpose (non-tensors in a .pt file).
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # (name, shape, dtype, why) of tensors whose dtype cannot hold a mask (complex RoPE
    # tables, exotic floats): reported as not-a-mask, never silently dropped.
    not_masks: list[tuple[str, tuple[int, ...], str, str]] = field(default_factory=list)

    def close(self) -> None:
        for t in self.tensors:
            close = getattr(t, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> LoadedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
