"""Hypothesis fuzzing of malformed safetensors / .npy / .npz headers: FileProblem or success,
never another exception. Bounded: a few hundred examples per kind."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from fuzz_cases import check_file, make_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("suffix", [".safetensors", ".npy", ".npz"])
@SETTINGS
@given(seed=st.integers(0, 2**64 - 1))
def test_corrupted_files_give_file_problems_only(tmp_path: Path, suffix: str, seed: int) -> None:
    rng = random.Random(seed)
    suffix, data = make_case(rng, suffix)
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    check_file(path, rng)
    assert path.read_bytes() == data


@SETTINGS
@given(data=st.binary(max_size=256), length=st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_arbitrary_bytes_after_a_length_field(tmp_path: Path, data: bytes,
                                              length: int | None) -> None:
    path = tmp_path / "fuzz.safetensors"
    prefix = (len(data) if length is None else length).to_bytes(8, "little")
    path.write_bytes(prefix + data)
    check_file(path, random.Random(0))


@SETTINGS
@given(header=st.dictionaries(
    st.sampled_from(["descr", "fortran_order", "shape", "x"]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner),
                 max_leaves=8)))
def test_npy_header_dicts(tmp_path: Path, header: dict[str, object]) -> None:
    body = repr(header).encode("utf-8") + b"\n"
    path = tmp_path / "fuzz.npy"
    path.write_bytes(b"\x93NUMPY\x03\x00" + len(body).to_bytes(4, "little") + body + bytes(32))
    check_file(path, random.Random(0))
