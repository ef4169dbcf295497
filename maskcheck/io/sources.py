"""TensorSources over bytes of a RawFile, and the --key selection shared by the loaders."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

import numpy as np

from maskcheck.errors import FileProblem
from maskcheck.io.base import rows_cols
from maskcheck.io.dtypes import decode
from maskcheck.io.rawfile import RawFile, quote


def clamp_rows(start: int, stop: int, rows: int) -> tuple[int, int]:
    start = max(0, min(int(start), rows))
    return start, max(start, min(int(stop), rows))


def decoded_dtype(name: str, storage: np.dtype[np.generic]) -> np.dtype[np.generic]:
    if name == "bool":
        return np.dtype(np.bool_)
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return np.dtype(np.float32)
    return storage.newbyteorder("=")


class MappedSource:
    """A C-ordered tensor at a byte offset of a file; each read maps only the rows asked for."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str,
                 storage: np.dtype[np.generic], raw: RawFile, offset: int) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self._storage = storage
        self._raw = raw
        self._offset = offset
        self._rows, self._cols = rows_cols(shape)
        self._row_bytes = self._cols * storage.itemsize

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        start, stop = clamp_rows(start, stop, self._rows)
        n = stop - start
        if n == 0 or self._cols == 0:
            return np.empty((n, self._cols), decoded_dtype(self.dtype, self._storage))
        buf = self._raw.read(self._offset + start * self._row_bytes, n * self._row_bytes)
        raw = np.frombuffer(buf, self._storage).reshape(n, self._cols)
        return decode(raw, self.dtype)

    def close(self) -> None:
        self._raw.close()


# Starts every "--key matched nothing here" problem: `analyze_paths` tells those apart from
# files that could not be read (a file --key filtered out is not an unreadable file).
NO_MATCH = "no tensor matches --key"


def select_names(path: str, names: Sequence[str], keys: Sequence[str] | None) -> list[str]:
    """The names matching any of the glob patterns `keys` (all names when keys is None)."""
    if keys is None:
        return list(names)
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, k) for k in keys)]
    if chosen:
        return chosen
    wanted = ", ".join(quote(k) for k in keys)
    if not names:
        raise FileProblem(path, f"{NO_MATCH} {wanted}: the file has no tensors")
    shown = ", ".join(quote(n) for n in names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    raise FileProblem(path, f"{NO_MATCH} {wanted} (tensors here: {shown}{more})")
