""".pt/.pth/.bin through torch.load(weights_only=True) only, and live torch tensors.

torch is imported inside the functions: without it, everything else in maskcheck works and a
.pt file gets a one-line "needs torch" problem.
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from maskcheck.errors import FileProblem, MaskcheckError
from maskcheck.io.base import LoadedFile, TensorSource, element_size, rows_cols
from maskcheck.io.rawfile import RawFile, with_hint
from maskcheck.io.sources import clamp_rows, select_names

NEEDS_TORCH = ("reading .pt files needs torch: pip install 'maskcheck[torch]' (in a pre-commit "
               "hook: additional_dependencies: [torch])")
WIDENED = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})
MAX_DEPTH = 64


class TorchSource:
    """A CPU torch tensor; each block is converted (and widened) on its own."""

    def __init__(self, name: str, tensor: Any, dtype: str) -> None:
        self.name = name
        self.shape: tuple[int, ...] = tuple(int(d) for d in tensor.shape)
        self.dtype = dtype
        self._rows, self._cols = rows_cols(self.shape)
        self._flat = tensor.reshape(self._rows, self._cols)

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        start, stop = clamp_rows(start, stop, self._rows)
        block = self._flat[start:stop]
        if self.dtype in WIDENED:
            block = block.float()  # exact: every bf16/float8 value is a float32
        out: np.ndarray = block.numpy()
        return out

    def close(self) -> None:
        self._flat = None


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _unsupported(tensor: Any) -> str | None:
    """Why a tensor cannot be analysed, or None."""
    import torch

    if tensor.layout != torch.strided:
        return f"{str(tensor.layout).removeprefix('torch.')} layout"
    if tensor.is_quantized:
        return "quantized tensor"
    if tensor.device.type == "meta":
        return "meta tensor (no data)"
    name = _dtype_name(tensor)
    try:
        element_size(name)
    except KeyError:
        return f"dtype {name} cannot hold a mask"
    return None


def torch_tensor_source(name: str, tensor: Any) -> TensorSource:
    """A live torch tensor (any device) as a TensorSource; moved to the CPU once."""
    why = _unsupported(tensor)
    if why is not None:
        raise MaskcheckError(f"tensor {name!r}: {why}")
    return TorchSource(name, tensor.detach().cpu(), _dtype_name(tensor))


def open_torch(path: str, keys: Sequence[str] | None = None) -> LoadedFile:
    try:
        import torch
    except ImportError:
        raise FileProblem(path, NEEDS_TORCH) from None
    raw = RawFile(path, ".pt")  # regular and readable, checked before torch sees it
    try:
        size, head = raw.size, bytes(raw.read(0, min(raw.size, 64)))
    finally:
        raw.close()
    if size == 0:
        raise FileProblem(path, "empty file (0 bytes), not a torch.save file")
    if not head.startswith(b"PK") and head[:1] != b"\x80":
        raise FileProblem(path, with_hint("not a torch.save file (neither a zip archive nor a "
                                          "pickle)", head))
    obj = _load(torch, path)
    loaded = LoadedFile(path=path)
    found: dict[str, Any] = {}
    root = os.path.splitext(os.path.basename(path))[0] or "tensor"
    for name, value in _flatten(obj, "", 0, root):
        if not isinstance(value, torch.Tensor):
            loaded.skipped.append((name, f"not a tensor ({type(value).__name__})"))
            continue
        why = _unsupported(value)
        if why is not None:
            loaded.skipped.append((name, why))
            if why.startswith("dtype "):
                loaded.not_masks.append((name, tuple(value.shape), _dtype_name(value), why))
        else:
            found.setdefault(name, value)
    for name in select_names(path, list(found), keys):
        t = found[name]
        loaded.tensors.append(TorchSource(name, t.detach(), _dtype_name(t)))
    return loaded


def _load(torch: Any, path: str) -> Any:
    # Not mmap=True: a mapped file truncated by another process while it is read kills the
    # process with SIGBUS; torch's own reads of a shrunk file raise, which is an error line.
    # torch.load's failures on hostile bytes have no narrow type (RuntimeError, EOFError,
    # UnpicklingError, ValueError, KeyError, ...): any exception here is a bad file.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            raise FileProblem(path, _refusal(e)) from None
        except Exception as e:
            raise FileProblem(path, _not_torch(e)) from None


def _refusal(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = str(e)
    if "WeightsUnpickler error:" in text:
        after = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()
        reason = after[0].strip() if after else "unsupported pickle content"
        return f"refused by torch.load(weights_only=True): {_clip(reason)}"
    first = lines[0] if lines else type(e).__name__
    if "load key" in first or "pickle data was truncated" in first:
        return f"not a torch.save file (pickle error: {_clip(first)})"
    return f"refused by torch.load(weights_only=True): {_clip(first)}"


def _not_torch(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    first = lines[0] if lines else type(e).__name__
    return f"not a readable torch.save file: {_clip(first)}"


def _clip(text: str, limit: int = 160) -> str:
    """The first sentence of torch's message, at most `limit` characters."""
    end = text.find(". ")
    if end > 0:
        text = text[:end + 1]
    return text if len(text) <= limit else text[:limit] + "..."


def _flatten(obj: Any, prefix: str, depth: int, root: str) -> Iterator[tuple[str, Any]]:
    if depth > MAX_DEPTH:
        yield prefix, obj
        return
    if isinstance(obj, dict):
        items: Iterator[tuple[Any, Any]] = iter(obj.items())
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        yield prefix or root, obj
        return
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        yield from _flatten(value, name, depth + 1, root)

