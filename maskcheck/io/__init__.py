"""Loaders: open a mask file of any supported kind as lazy TensorSources.

Every loader opens files read-only, checks each header's claims against the file before
allocating anything, never unpickles (torch.load(weights_only=True), no numpy pickles), and
turns every way a file can be bad into one FileProblem with a one-line reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from maskcheck.errors import FileProblem
from maskcheck.io.paths import SUFFIXES, TORCH_SUFFIXES, expand_paths, suffix_of

if TYPE_CHECKING:
    from maskcheck.io.base import LoadedFile, TensorSource

__all__ = [
    "SUFFIXES",
    "TORCH_SUFFIXES",
    "FileProblem",
    "LoadedFile",
    "TensorSource",
    "expand_paths",
    "open_file",
]


def __getattr__(name: str) -> Any:
    # `maskcheck.io.base` imports numpy: loaded on first use, so that `check` of a .py (which
    # reads through `maskcheck.io.rawfile`) stays numpy-free.
    if name in ("LoadedFile", "TensorSource"):
        from maskcheck.io import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_file(path: str, keys: Sequence[str] | None = None) -> LoadedFile:
    """Open one mask file; `keys` (fnmatch globs) pick tensors by name. Raises FileProblem."""
    suffix = suffix_of(path)
    if suffix == ".safetensors":
        from maskcheck.io.safetensors_file import open_safetensors

        return open_safetensors(path, keys)
    if suffix == ".npy":
        from maskcheck.io.numpy_files import open_npy

        return open_npy(path, keys)
    if suffix == ".npz":
        from maskcheck.io.numpy_files import open_npz

        return open_npz(path, keys)
    if suffix in TORCH_SUFFIXES:
        from maskcheck.io.torch_files import open_torch

        return open_torch(path, keys)
    shown = suffix or "(none)"
    raise FileProblem(path, f"unsupported file type {shown!r}: maskcheck reads "
                            f"{', '.join(SUFFIXES)}")
