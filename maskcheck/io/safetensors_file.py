""".safetensors: the header parsed and checked here, tensors read lazily through read-only maps.

No torch and no safetensors package needed: the format is 8 bytes of little-endian header
length, a JSON object, then the raw bytes. Every claim of the header is checked against the
file before anything is allocated; a header that lies makes the whole file untrustworthy.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from maskcheck.errors import FileProblem
from maskcheck.io.base import LoadedFile
from maskcheck.io.dtypes import SAFETENSORS_DTYPES, SAFETENSORS_NON_MASK_DTYPES
from maskcheck.io.rawfile import RawFile, quote, with_hint
from maskcheck.io.sources import MappedSource, select_names

# The safetensors library's own limit (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100 << 20
MAX_NDIM = 64  # numpy's limit
# Largest element count a shape may claim, zero dims ignored: numpy indexes with int64.
MAX_ELEMENTS = 1 << 62


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


@dataclass
class _Entry:
    name: str
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


def open_safetensors(path: str, keys: Sequence[str] | None = None) -> LoadedFile:
    raw = RawFile(path, ".safetensors")
    try:
        return _load(raw, keys)
    except BaseException:
        raw.close()
        raise


def _load(raw: RawFile, keys: Sequence[str] | None) -> LoadedFile:
    header, data_start = _read_header(raw)
    metadata = _metadata(raw.path, header.pop("__metadata__", None))
    data_len = raw.size - data_start
    entries = [_entry(raw.path, name, spec) for name, spec in header.items()]
    _check_bounds(raw.path, entries, data_start, raw.size, data_len)
    _check_overlaps(raw.path, entries)
    loaded = LoadedFile(path=raw.path, metadata=metadata)
    by_name = {e.name: e for e in entries}
    for name in select_names(raw.path, list(by_name), keys):
        e = by_name[name]
        if e.code in SAFETENSORS_DTYPES:
            dtype, storage = SAFETENSORS_DTYPES[e.code]
            loaded.tensors.append(
                MappedSource(name, e.shape, dtype, storage, raw, data_start + e.begin))
        elif e.code in SAFETENSORS_NON_MASK_DTYPES:
            why = f"dtype {e.code} cannot hold a mask"
            loaded.skipped.append((name, why))
            dtype = {"C64": "complex64", "C128": "complex128"}.get(e.code, e.code.lower())
            loaded.not_masks.append((name, tuple(e.shape), dtype, why))
        else:
            loaded.tensor_errors.append((name, f"unknown safetensors dtype {quote(e.code)}"))
    if not loaded.tensors:
        raw.close()  # nothing will read from it
    return loaded


def _read_header(raw: RawFile) -> tuple[dict[str, Any], int]:
    path = raw.path
    if raw.size == 0:
        raise FileProblem(path, "empty file (0 bytes), not a safetensors file")
    if raw.size < 8:
        raise FileProblem(path, f"file is {raw.size} bytes, too short for a safetensors header "
                                "(8-byte length, then JSON)")
    head = bytes(raw.read(0, min(raw.size, 64)))
    n = int.from_bytes(head[:8], "little")
    if n > MAX_HEADER_BYTES:
        raise FileProblem(path, with_hint(f"header length field says {n} bytes, over the 100 MiB "
                                          "limit (not a safetensors file, or corrupt)", head))
    if n > raw.size - 8:
        raise FileProblem(path, with_hint(f"header length field says {n} bytes but only "
                                          f"{raw.size - 8} bytes follow it (truncated, or not a "
                                          "safetensors file)", head))
    text = bytes(raw.read(8, n))
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileProblem(path, f"header is not UTF-8 (bad byte at header offset {e.start}): "
                                "not a safetensors file") from None
    try:
        header = json.loads(decoded, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise FileProblem(path, f"header names {quote(e.key)} twice") from None
    except json.JSONDecodeError as e:
        raise FileProblem(path, f"header is not valid JSON ({e.msg} at header offset {e.pos}): "
                                "not a safetensors file, or corrupt") from None
    except (RecursionError, ValueError) as e:  # nesting too deep, int with too many digits
        raise FileProblem(path, f"header JSON cannot be parsed safely: {type(e).__name__}"
                          ) from None
    if not isinstance(header, dict):
        raise FileProblem(path, f"header is a JSON {_json_kind(header)}, not an object")
    return header, 8 + n


def _json_kind(value: object) -> str:
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _metadata(path: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise FileProblem(path, "__metadata__ is not a map of strings to strings")
    return dict(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(path: str, name: str, spec: object) -> _Entry:
    q = quote(name)
    if not isinstance(spec, dict):
        raise FileProblem(path, f"header entry {q} is a JSON {_json_kind(spec)}, not an object")
    code, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if not isinstance(code, str):
        raise FileProblem(path, f"tensor {q}: dtype is missing or not a string")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise FileProblem(path, f"tensor {q}: shape must be a list of non-negative integers, "
                                f"got {_short(shape)}")
    if len(shape) > MAX_NDIM:
        raise FileProblem(path, f"tensor {q}: shape has {len(shape)} dims (at most {MAX_NDIM})")
    if math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
        raise FileProblem(path, f"tensor {q}: shape {_short(shape)} is too large (its element "
                                "count overflows)")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_int(o) and o >= 0 for o in offsets)):
        raise FileProblem(path, f"tensor {q}: data_offsets must be [begin, end] non-negative "
                                f"integers, got {_short(offsets)}")
    begin, end = offsets
    if end < begin:
        raise FileProblem(path, f"tensor {q}: data_offsets end {end} is before begin {begin}")
    if code in SAFETENSORS_DTYPES:
        itemsize = SAFETENSORS_DTYPES[code][1].itemsize
        need = math.prod(shape) * itemsize
        if need != end - begin:
            raise FileProblem(path, f"tensor {q}: shape {_short(shape)} of {code} needs {need} "
                                    f"bytes but data_offsets span {end - begin}")
    return _Entry(name, code, tuple(shape), begin, end)


def _short(value: object, limit: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _check_bounds(path: str, entries: list[_Entry], data_start: int, size: int,
                  data_len: int) -> None:
    for e in entries:
        if e.end > data_len:
            raise FileProblem(path, f"header says tensor {quote(e.name)} ends at byte "
                                    f"{data_start + e.end} but the file has {size} bytes "
                                    "(truncated, or offsets point outside the file)")


def _check_overlaps(path: str, entries: list[_Entry]) -> None:
    spans = sorted((e for e in entries if e.end > e.begin), key=lambda e: (e.begin, e.end))
    for prev, cur in itertools.pairwise(spans):
        if cur.begin < prev.end:
            raise FileProblem(path, f"tensors {quote(prev.name)} and {quote(cur.name)} overlap "
                                    f"(bytes {cur.begin}..{min(prev.end, cur.end)} of the data)")

