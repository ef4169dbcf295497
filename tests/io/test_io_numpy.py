"""The .npy / .npz loaders on files written by np.save / np.savez(_compressed)."""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import fingerprint, read_all

from maskcheck.errors import FileProblem
from maskcheck.io import open_file
from maskcheck.io.numpy_files import ZipStreamSource

DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", ">f4", ">i8"]


def sample(dtype: str, shape: tuple[int, ...] = (2, 3, 4)) -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.random(shape) * 50).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_npy_round_trip(tmp_path: Path, dtype: str) -> None:
    arr = sample(dtype)
    path = tmp_path / "attention_mask.npy"
    np.save(path, arr)
    with open_file(str(path)) as loaded:
        (src,) = loaded.tensors
        assert src.name == "attention_mask" and src.shape == (2, 3, 4)
        assert src.dtype == arr.dtype.newbyteorder("=").name
        got = read_all(src)
        assert got.dtype.isnative and np.array_equal(got, arr)


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 4), (2, 1, 3, 5)])
def test_fortran_order_reads_the_same_rows(tmp_path: Path, shape: tuple[int, ...]) -> None:
    arr = np.asfortranarray(np.arange(np.prod(shape), dtype=np.int32).reshape(shape))
    path = tmp_path / "f.npy"
    np.save(path, arr)
    with open_file(str(path)) as loaded:
        src = loaded.tensors[0]
        assert np.array_equal(read_all(src), arr)
        flat = np.ascontiguousarray(arr).reshape(-1, shape[-1])
        assert np.array_equal(src.read_rows(1, 3), flat[1:3])


def test_zero_dim_and_zero_size_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.float32(3.0))
    np.save(tmp_path / "e.npy", np.zeros((0, 4), bool))
    with open_file(str(tmp_path / "s.npy")) as loaded:
        assert loaded.tensors[0].shape == () and loaded.tensors[0].read_rows(0, 1).tolist() == [[3]]
    with open_file(str(tmp_path / "e.npy")) as loaded:
        assert loaded.tensors[0].read_rows(0, 0).shape == (0, 4)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_members_round_trip(tmp_path: Path, compressed: bool) -> None:
    arrays = {"attn_mask": np.tril(np.ones((6, 6), bool)),
              "key_padding_mask": np.zeros((2, 6), bool),
              "bias": sample("float16", (3, 6)),
              "fortran": np.asfortranarray(sample("float32", (2, 3, 6)))}
    path = tmp_path / "batch.npz"
    if compressed:
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
    else:
        np.savez(path, **arrays)  # type: ignore[arg-type]
    with open_file(str(path)) as loaded:
        got = {s.name: read_all(s) for s in loaded.tensors}
        assert not loaded.tensor_errors
    assert set(got) == set(arrays)
    for name, arr in arrays.items():
        assert np.array_equal(got[name], arr), name


def test_compressed_member_streams_forward_and_restarts_backward(tmp_path: Path) -> None:
    arr = np.arange(200 * 8, dtype=np.int64).reshape(200, 8)
    path = tmp_path / "c.npz"
    np.savez_compressed(path, m=arr)
    with open_file(str(path)) as loaded:
        (src,) = loaded.tensors
        assert isinstance(src, ZipStreamSource)
        for start in range(0, 200, 30):
            assert np.array_equal(src.read_rows(start, start + 30), arr[start:start + 30])
        assert np.array_equal(src.read_rows(10, 12), arr[10:12])  # going back restarts
        assert np.array_equal(src.read_rows(150, 151), arr[150:151])  # skipping forward


def test_npz_keys_and_non_npy_members(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.ones((2, 2), bool))
    path = tmp_path / "mixed.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("enc/mask.npy", buf.getvalue())
        zf.writestr("dec/mask.npy", buf.getvalue())
        zf.writestr("README.txt", "hello")
    with open_file(str(path), keys=["enc/*"]) as loaded:
        assert [s.name for s in loaded.tensors] == ["enc/mask"]
        assert loaded.skipped == [("README.txt", "not a .npy member")]
    with pytest.raises(FileProblem, match="no tensor matches --key 'nope'"):
        open_file(str(path), keys=["nope"])


def test_compressed_member_with_corrupt_data_is_a_file_problem(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    np.savez_compressed(path, m=np.random.default_rng(0).random((64, 64)))
    data = bytearray(path.read_bytes())
    local = data.find(b"PK\x03\x04")
    name_len, extra_len = struct.unpack("<HH", data[local + 26:local + 30])
    start = local + 30 + name_len + extra_len
    data[start + 400:start + 800] = bytes(400)  # inside the deflate stream, after the header
    path.write_bytes(bytes(data))
    with open_file(str(path)) as loaded, pytest.raises(FileProblem) as e:
        read_all(loaded.tensors[0])
    assert "member 'm'" in e.value.problem and "\n" not in e.value.problem


def test_npz_with_too_many_members_is_refused_before_listing(tmp_path: Path) -> None:
    # An end-of-central-directory record that claims 2**40 members via zip64.
    zip64_eocd = (b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 2**40, 2**40,
                                              0, 0))
    locator = b"PK\x06\x07" + struct.pack("<IQI", 0, 0, 1)
    eocd = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                                       0xFFFFFFFF, 0)
    path = tmp_path / "many.npz"
    path.write_bytes(zip64_eocd + locator + eocd)
    with pytest.raises(FileProblem, match="claims 1099511627776 members"):
        open_file(str(path))


def test_npy_and_npz_inputs_are_unchanged(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", sample("float32"))
    np.savez_compressed(tmp_path / "b.npz", m=sample("bool"))
    np.savez(tmp_path / "c.npz", m=sample("int64"))
    paths = sorted(tmp_path.iterdir())
    for p in paths:
        os.utime(p, ns=(10**9, 10**9))
    before = fingerprint(paths)
    for p in paths:
        with open_file(str(p)) as loaded:
            for s in loaded.tensors:
                read_all(s)
    assert fingerprint(paths) == before
