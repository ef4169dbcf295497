"""The safetensors loader on real files written by safetensors.numpy / safetensors.torch."""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, fingerprint, read_all
from safetensors.numpy import save_file as save_numpy

from maskcheck.errors import FileProblem
from maskcheck.io import open_file

NUMPY_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64",
                "uint64", "float16", "float32", "float64"]


def raw_file(path: Path, header: dict[str, object], data: bytes) -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_round_trip_every_dtype(tmp_path: Path, dtype: str) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.random((2, 3, 5)) * 100).astype(dtype)
    path = tmp_path / "m.safetensors"
    save_numpy({"attn_mask": arr}, str(path), metadata={"maskcheck.api": "sdpa"})
    with open_file(str(path)) as loaded:
        (src,) = loaded.tensors
        assert (src.name, src.shape, src.dtype) == ("attn_mask", (2, 3, 5), dtype)
        assert loaded.metadata == {"maskcheck.api": "sdpa"}
        got = read_all(src)
        assert got.dtype == arr.dtype and np.array_equal(got, arr)
        assert np.array_equal(src.read_rows(2, 4), arr.reshape(6, 5)[2:4])


def test_reads_are_zero_copy_views_of_a_read_only_map(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_numpy({"m": np.arange(20, dtype=np.float32).reshape(4, 5)}, str(path))
    with open_file(str(path)) as loaded:
        block = loaded.tensors[0].read_rows(1, 3)
        assert not block.flags.owndata and not block.flags.writeable
        with pytest.raises(ValueError):
            block[0, 0] = 1.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_narrow_floats_widen_exactly_like_torch(tmp_path: Path, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    every = torch.arange(256 if dtype.startswith("float8") else 65536, dtype=torch.int32)
    bits = every.to(torch.uint8) if dtype.startswith("float8") else every.to(torch.int16)
    t = bits.view(getattr(torch, dtype)).reshape(-1, 64)
    path = tmp_path / "m.safetensors"
    save_file({"m": t}, str(path))
    with open_file(str(path)) as loaded:
        (src,) = loaded.tensors
        assert src.dtype == dtype and src.shape == tuple(t.shape)
        got = read_all(src)
    ref = t.float().numpy()
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))  # NaN payloads too


def test_torch_round_trip_mixed_file(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    tensors = {
        "bool_mask": torch.rand(2, 4, 4) > 0.5,
        "additive": torch.full((4, 4), float("-inf")).triu(1).half(),
        "hf": torch.ones(2, 7, dtype=torch.int64),
        "scalar": torch.tensor(-1e9),
        "empty": torch.zeros(0, 3, dtype=torch.bool),
    }
    path = tmp_path / "mixed.safetensors"
    save_file(tensors, str(path))
    with open_file(str(path)) as loaded:
        got = {s.name: read_all(s) for s in loaded.tensors}
        dtypes = {s.name: s.dtype for s in loaded.tensors}
    assert set(got) == set(tensors)
    for name, t in tensors.items():
        assert np.array_equal(got[name], t.numpy()), name
        assert dtypes[name] == str(t.dtype).removeprefix("torch.")


def test_zero_dim_and_zero_size_tensors_are_readable(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "z.safetensors", {
        "scalar": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
        "no_rows": {"dtype": "BOOL", "shape": [0, 8], "data_offsets": [4, 4]},
        "no_cols": {"dtype": "F16", "shape": [3, 0], "data_offsets": [4, 4]},
    }, struct.pack("<f", 2.5))
    with open_file(str(path)) as loaded:
        s = {t.name: t for t in loaded.tensors}
        assert s["scalar"].shape == () and s["scalar"].read_rows(0, 1).tolist() == [[2.5]]
        assert s["no_rows"].read_rows(0, 0).shape == (0, 8)
        assert s["no_rows"].read_rows(0, 0).dtype == np.bool_
        assert s["no_cols"].read_rows(0, 3).shape == (3, 0)


def test_bool_bytes_other_than_0_and_1_read_as_true(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "b.safetensors",
                    {"m": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}},
                    bytes([0, 1, 2, 255]))
    with open_file(str(path)) as loaded:
        got = loaded.tensors[0].read_rows(0, 1)
    assert got.dtype == np.bool_ and got.tolist() == [[False, True, True, True]]
    assert got.view(np.uint8).max() == 1


def test_thousands_of_tensors_open_fast(tmp_path: Path) -> None:
    n = 5000
    arrays = {f"layers.{i}.attn.mask": np.ones((2, 2), bool) for i in range(n)}
    path = tmp_path / "many.safetensors"
    save_numpy(arrays, str(path))
    t0 = time.perf_counter()
    with open_file(str(path)) as loaded:
        assert len(loaded.tensors) == n
        assert all(s.read_rows(0, 2).all() for s in loaded.tensors)
    assert time.perf_counter() - t0 < 3.0


def test_keys_select_tensors_by_glob(tmp_path: Path) -> None:
    path = tmp_path / "k.safetensors"
    save_numpy({"enc.mask": np.ones(2, bool), "dec.mask": np.ones(2, bool),
                "weight": np.ones(2, np.float32)}, str(path))
    with open_file(str(path), keys=["*.mask"]) as loaded:
        assert sorted(s.name for s in loaded.tensors) == ["dec.mask", "enc.mask"]
    with open_file(str(path), keys=["weight", "dec.*"]) as loaded:
        assert sorted(s.name for s in loaded.tensors) == ["dec.mask", "weight"]
    with pytest.raises(FileProblem) as e:
        open_file(str(path), keys=["attn_*"])
    assert "no tensor matches --key 'attn_*'" in e.value.problem
    assert "'weight'" in e.value.problem and "\n" not in e.value.problem


def test_huge_tensor_is_never_read_eagerly(tmp_path: Path) -> None:
    # A sparse 4 GiB bool tensor: opening and reading one row must not touch the rest.
    rows = cols = 1 << 16
    path = raw_file(tmp_path / "big.safetensors",
                    {"attn_mask": {"dtype": "BOOL", "shape": [rows, cols],
                                   "data_offsets": [0, rows * cols]}}, b"")
    with open(path, "r+b") as f:
        f.truncate(f.seek(0, os.SEEK_END) + rows * cols)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with open_file(str(path)) as loaded:
        (src,) = loaded.tensors
        block = src.read_rows(rows - 2, rows)
        assert block.shape == (2, cols) and not block.any()
        del block
    assert time.perf_counter() - t0 < 2.0
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024


def test_inputs_are_never_modified(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_numpy({"attn_mask": np.tril(np.ones((8, 8), bool))}, str(path))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = fingerprint([path])
    with open_file(str(path)) as loaded:
        read_all(loaded.tensors[0])
    assert fingerprint([path]) == before


def test_works_without_torch(tmp_path: Path) -> None:
    path = tmp_path / "bf16.safetensors"
    raw_file(path, {"m": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
                    "f8": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [4, 5]}},
             struct.pack("<HHB", 0x3F80, 0xFF80, 0x38))
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from maskcheck.io import open_file\n"
        f"lf = open_file({str(path)!r})\n"
        "print([t.read_rows(0, 1).tolist() for t in lf.tensors])\n"
        "print('torch' in sys.modules and sys.modules['torch'] is not None)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[[[1.0, -inf]], [[1.0]]]", "False"]
