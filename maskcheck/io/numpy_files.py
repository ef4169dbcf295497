""".npy and .npz: headers parsed here (never unpickled), data read lazily or streamed.

.npy: the header is a Python literal, read with ast.literal_eval (no code runs) and checked
before any data is touched; the data is read through read-only maps, a block at a time.
.npz: a zip of .npy members. Stored members are read in place like a .npy; compressed ones are
decompressed as a stream, one block at a time, so a zip bomb costs time, never memory.
"""

from __future__ import annotations

import ast
import lzma
import math
import os
import struct
import warnings
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np

from maskcheck.errors import FileProblem
from maskcheck.io.base import LoadedFile, TensorSource, rows_cols
from maskcheck.io.dtypes import NUMPY_NAMES, decode
from maskcheck.io.rawfile import RawFile, quote, with_hint
from maskcheck.io.sources import MappedSource, clamp_rows, decoded_dtype, select_names

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 1 << 16
MAX_NDIM = 64
MAX_ELEMENTS = 1 << 62
MAX_MEMBERS = 100_000
# A Fortran-ordered compressed member cannot be streamed by rows; up to this size it is
# decompressed whole.
MAX_FORTRAN_INFLATE = 256 << 20
# Deflate cannot expand data more than ~1032:1; a member claiming more lies about its size.
DEFLATE_MAX_RATIO = 1100


# What zipfile and its decompressors raise on corrupt archives (zipfile documents only
# BadZipFile, but corrupt headers and streams surface as these too).
ZIP_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error,
    NotImplementedError, RuntimeError, KeyError, IndexError, OverflowError, zlib.error,
    lzma.LZMAError,
)


class _BadNpy(Exception):
    """A problem in one .npy header; the caller says which file or member."""


@dataclass
class NpyHeader:
    shape: tuple[int, ...]
    fortran: bool
    storage: np.dtype[np.generic]
    dtype: str
    data_offset: int  # bytes before the data: magic, lengths and header text

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.storage.itemsize

    def describe(self) -> str:
        return f"shape {self.shape} {self.dtype}"


def parse_npy_header(read: Callable[[int], bytes]) -> NpyHeader:
    """Parse a .npy header from `read(n)` (returns up to n bytes). Raises _BadNpy."""
    head = read(10)
    if not head:
        raise _BadNpy("empty (0 bytes), not a .npy file")
    if len(head) < 10 or not head.startswith(MAGIC):
        raise _BadNpy(with_hint(f"bad magic {head[:6]!r}: not a .npy file (expected {MAGIC!r})",
                                head))
    version = (head[6], head[7])
    if version == (1, 0):
        length, prefix = int.from_bytes(head[8:10], "little"), 10
    elif version in ((2, 0), (3, 0)):
        more = read(2)
        if len(more) < 2:
            raise _BadNpy("file ends inside the .npy header")
        length, prefix = int.from_bytes(head[8:10] + more, "little"), 12
    else:
        raise _BadNpy(f"unsupported .npy format version {version[0]}.{version[1]}")
    if length > MAX_HEADER_BYTES:
        raise _BadNpy(f"header length {length} bytes is over the {MAX_HEADER_BYTES} limit")
    raw_text = read(length)
    if len(raw_text) < length:
        raise _BadNpy(f"file ends inside the .npy header (header says {length} bytes)")
    try:
        text = raw_text.decode("utf-8" if version == (3, 0) else "latin1")
        with warnings.catch_warnings():  # e.g. SyntaxWarning on "\d": the library never prints
            warnings.simplefilter("ignore")
            info = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise _BadNpy("header is not a Python literal dict") from None
    shape, fortran, storage = _check_header_dict(info)
    return NpyHeader(shape, fortran, storage, NUMPY_NAMES[storage.newbyteorder("=").name],
                     prefix + length)


def _check_header_dict(
    info: object,
) -> tuple[tuple[int, ...], bool, np.dtype[np.generic]]:
    if not isinstance(info, dict) or set(info) != {"descr", "fortran_order", "shape"}:
        raise _BadNpy("header must be a dict with exactly descr, fortran_order and shape")
    storage = _dtype(info["descr"])
    fortran = info["fortran_order"]
    if not isinstance(fortran, bool):
        raise _BadNpy(f"fortran_order must be True or False, got {_short(fortran)}")
    shape = info["shape"]
    if not isinstance(shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _BadNpy(f"shape must be a tuple of non-negative integers, got {_short(shape)}")
    if len(shape) > MAX_NDIM:
        raise _BadNpy(f"shape has {len(shape)} dims (at most {MAX_NDIM})")
    if math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
        raise _BadNpy(f"shape {_short(shape)} is too large (its element count overflows)")
    return tuple(shape), fortran, storage


def _dtype(descr: object) -> np.dtype[np.generic]:
    if not isinstance(descr, (str, list)):
        raise _BadNpy(f"descr must be a dtype string, got {_short(descr)}")
    try:
        dt = np.dtype(descr)
    except Exception:  # numpy's dtype-string parser has no narrow failure type (SyntaxError..)
        raise _BadNpy(f"unknown dtype {_short(descr)}") from None
    if dt.hasobject:
        raise _BadNpy("object dtype: maskcheck never unpickles (allow_pickle=False)")
    if dt.fields is not None or dt.subdtype is not None:
        raise _BadNpy(f"structured dtype {_short(descr)}: not a mask")
    if dt.newbyteorder("=").name not in NUMPY_NAMES:
        raise _BadNpy(f"dtype {dt.name} cannot hold a mask (bool, integer or float16/32/64)")
    return dt


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class FortranSource:
    """A Fortran-ordered array (rare): rows of the C-order view gathered block by block."""

    def __init__(self, name: str, header: NpyHeader, data: np.ndarray,
                 close: Callable[[], None] | None = None) -> None:
        self.name = name
        self.shape = header.shape
        self.dtype = header.dtype
        self._storage = header.storage
        self._array = data.reshape(header.shape, order="F")
        self._rows, self._cols = rows_cols(header.shape)
        self._close = close

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        start, stop = clamp_rows(start, stop, self._rows)
        if stop == start or self._cols == 0:
            return np.empty((stop - start, self._cols), decoded_dtype(self.dtype, self._storage))
        if len(self.shape) == 2:
            block = self._array[start:stop]
        else:
            lead = np.unravel_index(np.arange(start, stop), self.shape[:-1])
            block = self._array[lead]
        return decode(np.ascontiguousarray(block), self.dtype)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def _file_reader(raw: RawFile, start: int, end: int) -> Callable[[int], bytes]:
    pos = start

    def read(n: int) -> bytes:
        nonlocal pos
        n = max(0, min(n, end - pos))
        out = bytes(raw.read(pos, n))
        pos += n
        return out

    return read


def _mapped(name: str, header: NpyHeader, raw: RawFile, offset: int) -> TensorSource:
    if header.fortran and len(header.shape) >= 2:
        data = np.frombuffer(raw.read(offset, header.nbytes), header.storage)
        return FortranSource(name, header, data, raw.close)
    return MappedSource(name, header.shape, header.dtype, header.storage, raw, offset)


# ------------------------------------------------------------------------------------- .npy

def open_npy(path: str, keys: Sequence[str] | None = None) -> LoadedFile:
    raw = RawFile(path, ".npy")
    try:
        try:
            header = parse_npy_header(_file_reader(raw, 0, raw.size))
        except _BadNpy as e:
            raise FileProblem(path, str(e)) from None
        if header.data_offset + header.nbytes > raw.size:
            raise FileProblem(path, f"header says {header.describe()}: {header.nbytes} bytes "
                                    f"from byte {header.data_offset}, but the file has "
                                    f"{raw.size} bytes (truncated, or the shape lies)")
        name = _npy_name(path)
        select_names(path, [name], keys)
        return LoadedFile(path=path, tensors=[_mapped(name, header, raw, header.data_offset)])
    except BaseException:
        raw.close()
        raise


def _npy_name(path: str) -> str:
    base = os.path.basename(path)
    return base[:-4] if base.lower().endswith(".npy") else base


# ------------------------------------------------------------------------------------- .npz

class _Archive:
    """The zip and the read-only file under it, shared by the members' sources."""

    def __init__(self, raw: RawFile) -> None:
        self.raw = raw
        assert raw.fd is not None
        self.fileobj: IO[bytes] = os.fdopen(os.dup(raw.fd), "rb")
        try:
            self.zip = zipfile.ZipFile(self.fileobj)
        except BaseException:
            self.fileobj.close()
            raise

    def close(self) -> None:
        self.zip.close()
        self.fileobj.close()
        self.raw.close()


def open_npz(path: str, keys: Sequence[str] | None = None) -> LoadedFile:
    raw = RawFile(path, ".npz")
    try:
        _check_zip_directory(raw)
        try:
            archive = _Archive(raw)
        except ZIP_ERRORS as e:
            raise FileProblem(path, f"not a readable zip archive: {_one_line(e)}") from None
    except BaseException:
        raw.close()
        raise
    try:
        return _load_npz(archive, keys)
    except BaseException:
        archive.close()
        raise


def _load_npz(archive: _Archive, keys: Sequence[str] | None) -> LoadedFile:
    path = archive.raw.path
    loaded = LoadedFile(path=path)
    members: dict[str, zipfile.ZipInfo] = {}
    for info in archive.zip.infolist():
        if info.filename.endswith("/"):
            continue
        if not info.filename.endswith(".npy"):
            loaded.skipped.append((info.filename, "not a .npy member"))
        elif info.filename[:-4] in members:
            loaded.skipped.append((info.filename, "duplicate member name"))
        else:
            members[info.filename[:-4]] = info
    for name in select_names(path, list(members), keys):
        try:
            loaded.tensors.append(_member_source(archive, name, members[name]))
        except _BadNpy as e:
            loaded.tensor_errors.append((name, str(e)))
    if not loaded.tensors:
        archive.close()
    return loaded


def _member_source(archive: _Archive, name: str, info: zipfile.ZipInfo) -> TensorSource:
    if info.flag_bits & 0x1:
        raise _BadNpy("member is encrypted")
    if info.compress_type == zipfile.ZIP_STORED:
        return _stored_source(archive, name, info)
    if (info.compress_type == zipfile.ZIP_DEFLATED
            and info.file_size > info.compress_size * DEFLATE_MAX_RATIO + 4096):
        raise _BadNpy(f"member claims {info.file_size} bytes from {info.compress_size} deflated "
                      "bytes, more than deflate can produce (lying size or zip bomb)")
    try:
        with archive.zip.open(info) as stream:
            header = parse_npy_header(stream.read)
    except ZIP_ERRORS as e:
        raise _BadNpy(f"cannot decompress member: {_one_line(e)}") from None
    _check_member_size(header, info)
    if header.fortran and len(header.shape) >= 2:
        if header.nbytes > MAX_FORTRAN_INFLATE:
            raise _BadNpy(f"Fortran-ordered compressed member of {header.nbytes} bytes cannot be "
                          "streamed by rows (store it uncompressed or C-ordered)")
        return _LazyFortran(archive, name, info, header)
    return ZipStreamSource(archive, name, info, header)


def _check_member_size(header: NpyHeader, info: zipfile.ZipInfo) -> None:
    need = header.data_offset + header.nbytes
    if info.file_size != need:
        raise _BadNpy(f"header says {header.describe()} ({need} bytes with the header) but the "
                      f"zip entry holds {info.file_size} bytes")


def _stored_source(archive: _Archive, name: str, info: zipfile.ZipInfo) -> TensorSource:
    raw = archive.raw
    if info.header_offset + 30 > raw.size:
        raise _BadNpy("member's local header is past the end of the file (truncated zip)")
    local = bytes(raw.read(info.header_offset, 30))
    if local[:4] != b"PK\x03\x04":
        raise _BadNpy("bad local file header (corrupt zip)")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if info.compress_size != info.file_size:
        raise _BadNpy("stored member's compressed and uncompressed sizes differ (corrupt zip)")
    end = start + info.file_size
    if end > raw.size:
        raise _BadNpy(f"member data ends at byte {end} but the file has {raw.size} bytes "
                      "(truncated zip)")
    header = parse_npy_header(_file_reader(raw, start, end))
    _check_member_size(header, info)
    return _mapped(name, header, raw, start + header.data_offset)


class ZipStreamSource:
    """A compressed member decompressed as a stream: reads with increasing `start` cost one
    pass; going back restarts the stream. Memory: one block."""

    def __init__(self, archive: _Archive, name: str, info: zipfile.ZipInfo,
                 header: NpyHeader) -> None:
        self.name = name
        self.shape = header.shape
        self.dtype = header.dtype
        self._archive, self._info, self._header = archive, info, header
        self._rows, self._cols = rows_cols(header.shape)
        self._row_bytes = self._cols * header.storage.itemsize
        self._stream: IO[bytes] | None = None
        self._pos = 0  # next row the stream yields

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        start, stop = clamp_rows(start, stop, self._rows)
        n = stop - start
        if n == 0 or self._cols == 0:
            return np.empty((n, self._cols), decoded_dtype(self.dtype, self._header.storage))
        try:
            if self._stream is None or start < self._pos:
                self._restart()
            self._skip((start - self._pos) * self._row_bytes)
            data = self._read_exact(n * self._row_bytes)
        except ZIP_ERRORS as e:
            self._drop()
            raise FileProblem(self._archive.raw.path,
                              f"member {quote(self.name)}: {_one_line(e)}") from None
        self._pos = stop
        if stop == self._rows:
            self._drop()
        raw = np.frombuffer(data, self._header.storage).reshape(n, self._cols)
        return decode(raw, self.dtype)

    def _restart(self) -> None:
        self._drop()
        self._stream = self._archive.zip.open(self._info)
        self._read_exact(self._header.data_offset)
        self._pos = 0

    def _skip(self, nbytes: int) -> None:
        while nbytes > 0:
            step = min(nbytes, 16 << 20)
            self._read_exact(step)
            nbytes -= step

    def _read_exact(self, nbytes: int) -> bytes:
        assert self._stream is not None
        parts, got = [], 0
        while got < nbytes:
            chunk = self._stream.read(nbytes - got)
            if not chunk:
                raise EOFError(f"compressed data ends {nbytes - got} bytes early (truncated)")
            parts.append(chunk)
            got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self._drop()
        self._archive.close()


class _LazyFortran:
    """A small Fortran-ordered compressed member, inflated whole on first read."""

    def __init__(self, archive: _Archive, name: str, info: zipfile.ZipInfo,
                 header: NpyHeader) -> None:
        self.name = name
        self.shape = header.shape
        self.dtype = header.dtype
        self._archive, self._info, self._header = archive, info, header
        self._inner: FortranSource | None = None

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        if self._inner is None:
            stream = ZipStreamSource(self._archive, self.name, self._info, self._header)
            try:
                stream._restart()
                data = stream._read_exact(self._header.nbytes)
            except ZIP_ERRORS as e:
                raise FileProblem(self._archive.raw.path,
                                  f"member {quote(self.name)}: {_one_line(e)}") from None
            finally:
                stream._drop()
            self._inner = FortranSource(self.name, self._header,
                                        np.frombuffer(data, self._header.storage))
        return self._inner.read_rows(start, stop)

    def close(self) -> None:
        self._archive.close()


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _check_zip_directory(raw: RawFile) -> None:
    """Refuse what is not a zip, or a directory too large to list, before zipfile reads it."""
    path = raw.path
    if raw.size == 0:
        raise FileProblem(path, "empty file (0 bytes), not an .npz (zip) archive")
    tail_len = min(raw.size, 65535 + 22)
    tail = bytes(raw.read(raw.size - tail_len, tail_len))
    pos = tail.rfind(b"PK\x05\x06")
    if pos < 0 or len(tail) - pos < 22:
        if bytes(raw.read(0, min(4, raw.size))) == b"PK\x03\x04":
            raise FileProblem(path, "truncated zip archive: no end-of-central-directory record")
        raise FileProblem(path, with_hint("not a zip archive (an .npz is a zip of .npy files)",
                                          bytes(raw.read(0, min(64, raw.size)))))
    entries, cd_size = struct.unpack("<HI", tail[pos + 10:pos + 16])
    total, size = int(entries), int(cd_size)
    if (entries == 0xFFFF or cd_size == 0xFFFFFFFF) and pos >= 20:
        total, size = _zip64_counts(raw, tail[pos - 20:pos], total, size)
    if total > MAX_MEMBERS:
        raise FileProblem(path, f"zip directory claims {total} members (limit {MAX_MEMBERS})")
    if size > raw.size:
        raise FileProblem(path, f"zip central directory claims {size} bytes but the file has "
                                f"{raw.size} (truncated or corrupt)")


def _zip64_counts(raw: RawFile, locator: bytes, total: int, size: int) -> tuple[int, int]:
    if locator[:4] != b"PK\x06\x07":
        return total, size
    (offset,) = struct.unpack("<Q", locator[8:16])
    if offset + 56 > raw.size:
        return total, size
    record = bytes(raw.read(offset, 56))
    if record[:4] != b"PK\x06\x06":
        return total, size
    entries, cd_size = struct.unpack("<QQ", record[32:48])
    return int(entries), int(cd_size)
