"""Malformed mask files for the loader fuzzers: valid files, then corrupted at random.

Used by tests/io/fuzz/test_io_fuzz.py (hypothesis, bounded) and benchmarks/fuzz_loaders.py
(a long loop). The contract under test: open_file and read_rows either work or raise
FileProblem; never any other exception, never a hang, never unbounded memory.
"""

from __future__ import annotations

import io
import json
import math
import random
import struct
import zipfile
from pathlib import Path

import numpy as np

from maskcheck.errors import FileProblem
from maskcheck.io import open_file

ST_CODES = ["BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32",
            "F64", "F8_E4M3", "F8_E5M2"]
ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
            "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
NP_DTYPES = ["bool", "u1", "i1", "<i2", "<u2", "<i4", ">i4", "<f2", "<f4", ">f8", "<i8"]
INTERESTING = [0, 1, 7, 8, 255, 256, 2**31 - 1, 2**32, 2**53, 2**63 - 1, 2**64 - 1, 10**18]
JUNK: list[object] = [None, True, -1, 1.5, "x", [], {}, [1, "a"], 2**70, -(2**70), "F32",
                      [2**64, 1]]


def _shape(rng: random.Random) -> list[int]:
    return [rng.choice([0, 1, 2, 3, 5, 8]) for _ in range(rng.randint(0, 4))]


def valid_safetensors(rng: random.Random) -> bytes:
    header: dict[str, object] = {}
    data = bytearray()
    for i in range(rng.randint(0, 4)):
        code, shape = rng.choice(ST_CODES), _shape(rng)
        n = math.prod(shape) * ST_SIZES[code]
        header[f"t{i}.mask"] = {"dtype": code, "shape": shape,
                                "data_offsets": [len(data), len(data) + n]}
        data += rng.randbytes(n)
    if rng.random() < 0.5:
        header["__metadata__"] = {"maskcheck.api": "sdpa"}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(data)


def junk_safetensors(rng: random.Random) -> bytes:
    """A header of plausible keys holding implausible values."""
    header: dict[str, object] = {}
    for i in range(rng.randint(0, 3)):
        entry: dict[str, object] = {}
        entry["dtype"] = rng.choice(ST_CODES + JUNK)
        entry["shape"] = rng.choice([_shape(rng), [rng.choice(INTERESTING)] * 3, *JUNK])
        begin = rng.choice(INTERESTING[:6])
        entry["data_offsets"] = rng.choice(
            [[begin, begin + rng.choice(INTERESTING[:6])], [rng.choice(INTERESTING)] * 2,
             *JUNK])
        if rng.random() < 0.1:
            del entry[rng.choice(list(entry))]
        header[f"t{i}"] = entry if rng.random() < 0.9 else rng.choice(JUNK)
    if rng.random() < 0.2:
        header["__metadata__"] = rng.choice([{"a": "b"}, *JUNK])
    text = json.dumps(header).encode()
    length = len(text) if rng.random() < 0.8 else rng.choice(INTERESTING)
    return struct.pack("<Q", length % 2**64) + text + rng.randbytes(rng.randint(0, 64))


def valid_npy(rng: random.Random) -> bytes:
    dtype = np.dtype(rng.choice(NP_DTYPES))
    shape = tuple(_shape(rng))
    raw = rng.randbytes(math.prod(shape) * dtype.itemsize)
    arr = np.frombuffer(raw, dtype).reshape(shape)
    if rng.random() < 0.3:
        arr = np.asfortranarray(arr)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=rng.choice([(1, 0), (2, 0), (3, 0)]))
    return buf.getvalue()


def junk_npy(rng: random.Random) -> bytes:
    descr = rng.choice([*NP_DTYPES, "|O", "<U4", "V8", "<c8", "(2,)<f4", "<f16", "M8[s]",
                        [("a", "<i4")], [("a", "|O")], *JUNK])
    shape = rng.choice([tuple(_shape(rng)), (10**6,) * 3, (-1, 2), (2.0,), (True,), *JUNK])
    fortran = rng.choice([False, True, 0, "no", None])
    text = repr({"descr": descr, "fortran_order": fortran, "shape": shape})
    if rng.random() < 0.1:
        text = rng.choice(["[1, 2]", "{", "__import__('os')", "{'descr': '<f4'}", "(" * 200])
    body = text.encode("latin1", "replace") + b"\n"
    major = rng.choice([1, 2, 3, 9])
    fmt = "<H" if major == 1 else "<I"
    length = len(body) if rng.random() < 0.8 else rng.choice(INTERESTING) % 2**16
    return (b"\x93NUMPY" + bytes([major, 0]) + struct.pack(fmt, length) + body
            + rng.randbytes(rng.randint(0, 64)))


def valid_npz(rng: random.Random) -> bytes:
    buf = io.BytesIO()
    method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    with zipfile.ZipFile(buf, "w", method) as zf:
        for i in range(rng.randint(0, 3)):
            zf.writestr(f"m{i}.npy", valid_npy(rng))
    return buf.getvalue()


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:  # flip bits
            out[min(pos, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and out:  # an interesting byte
            out[min(pos, len(out) - 1)] = rng.choice([0, 0x7F, 0x80, 0xFF, ord("{"), ord(",")])
        elif op == 2:  # insert
            out[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 3:  # delete
            del out[pos:pos + rng.randint(1, 32)]
        elif op == 4:  # truncate
            del out[pos:]
        elif op == 5:  # an interesting little-endian integer
            width = rng.choice([2, 4, 8])
            value = rng.choice(INTERESTING) % 2**(8 * width)
            out[pos:pos + width] = value.to_bytes(width, "little")
        else:  # duplicate a chunk
            out[pos:pos] = out[max(0, pos - 32):pos]
    return bytes(out)


MAKERS = {
    ".safetensors": [valid_safetensors, junk_safetensors],
    ".npy": [valid_npy, junk_npy],
    ".npz": [valid_npz],
}


def make_case(rng: random.Random, suffix: str | None = None) -> tuple[str, bytes]:
    suffix = suffix or rng.choice(list(MAKERS))
    data = rng.choice(MAKERS[suffix])(rng)
    roll = rng.random()
    if roll < 0.7:
        data = mutate(rng, data)
    elif roll < 0.75:
        data = rng.randbytes(rng.randint(0, 128))
    return suffix, data


def check_file(path: Path, rng: random.Random) -> str:
    """Open and read every tensor; returns "ok" or "problem". Anything else propagates."""
    try:
        with open_file(str(path)) as loaded:
            for source in loaded.tensors:
                rows = math.prod(source.shape[:-1]) if source.shape else 1
                step = rng.randint(1, 4)
                for start in range(0, rows, step):
                    block = source.read_rows(start, start + step)
                    cols = source.shape[-1] if source.shape else 1
                    assert block.shape == (min(step, rows - start), cols)
    except FileProblem as e:
        assert "\n" not in e.problem, e.problem
        return "problem"
    return "ok"
