"""fixtures/hostile: every broken or malicious file gets its one-line problem, nothing runs,
nothing is modified, and the valid files next to them are still reported."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from conftest import HOSTILE, cli_env, fingerprint, maskcheck_cmd

from maskcheck.analysis import analyze_file
from maskcheck.io import expand_paths

MEMORY_LIMIT = 4 << 30
# Files whose other tensors are still reported beside the error of one bad tensor.
PARTIAL = {"st_unknown_dtype.safetensors", "npz_object_member.npz"}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_hostile", HOSTILE / "make_hostile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str | None]]:
    out = tmp_path_factory.mktemp("hostile")
    expected: dict[str, str | None] = load_generator().write(out, fs=True)
    return out, expected


def test_committed_fixtures_are_the_generator_output(
        hostile_dir: tuple[Path, dict[str, str | None]]) -> None:
    out, expected = hostile_dir
    committed = json.loads((HOSTILE / "expected.json").read_text())
    have_torch = importlib.util.find_spec("torch") is not None
    for name, phrase in committed.items():
        if name.startswith("pt_") and not have_torch:
            continue
        assert expected[name] == phrase, name
        # torch.save output may differ across torch versions: content checked by phrase only
        if not name.startswith("pt_"):
            assert (HOSTILE / name).read_bytes() == (out / name).read_bytes(), name
    assert len(committed) >= 30


def test_every_case_gets_its_specific_problem(
        hostile_dir: tuple[Path, dict[str, str | None]], no_marker: Path) -> None:
    out, expected = hostile_dir
    before = fingerprint(out.iterdir())
    _, problems = expand_paths([str(out)])
    listed = dict(problems)
    for name, phrase in expected.items():
        path = str(out / name)
        error = listed[path] if path in listed else analyze_file(path).error
        if phrase is None:
            assert error is None, (name, error)
        else:
            assert error is not None and phrase in error, (name, error)
            assert "\n" not in error and "Traceback" not in error
    assert fingerprint(out.iterdir()) == before


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def test_one_cli_run_over_all_of_them(
        hostile_dir: tuple[Path, dict[str, str | None]], no_marker: Path) -> None:
    out, expected = hostile_dir
    before = fingerprint(out.iterdir())
    r = subprocess.run(maskcheck_cmd("inspect", str(out), "--format", "json"),
                       capture_output=True, text=True, env=cli_env(), timeout=240,
                       check=False, preexec_fn=_limit_memory)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr
    doc = json.loads(r.stdout)
    by_path = {f["path"]: f for f in doc["files"]}
    for name, phrase in expected.items():
        entry = by_path[str(out / name)]
        if phrase is None:
            assert entry["error"] is None and entry["tensors"], name
        else:
            assert phrase in entry["error"], name
            assert name in PARTIAL or entry["tensors"] == [], name
    assert doc["summary"]["unreadable"] == sum(p is not None for p in expected.values())
    assert fingerprint(out.iterdir()) == before


@pytest.mark.parametrize("name", [
    "st_terabyte_shape.safetensors", "npy_object_pickle.npy", "pt_malicious_pickle.pt",
    "fs_loop.safetensors",
])
def test_one_by_one_cli_runs(hostile_dir: tuple[Path, dict[str, str | None]], name: str,
                             no_marker: Path) -> None:
    out, expected = hostile_dir
    phrase = expected[name]
    assert phrase is not None
    r = subprocess.run(maskcheck_cmd("inspect", str(out / name)), capture_output=True,
                       text=True, env={**cli_env(), "COLUMNS": "200"}, timeout=120,
                       check=False, preexec_fn=_limit_memory)
    assert r.returncode == 2, r.stdout + r.stderr
    output = r.stdout + r.stderr
    assert "Traceback" not in output
    lines = [ln for ln in output.splitlines() if phrase in ln]
    assert len(lines) == 1 and os.fspath(out / name) in lines[0], output


def test_valid_file_beside_bad_ones_is_reported_normally(
        hostile_dir: tuple[Path, dict[str, str | None]]) -> None:
    out, _ = hostile_dir
    r = subprocess.run(maskcheck_cmd("inspect", str(out / "st_ok.safetensors"),
                                     str(out / "st_overlap.safetensors"), "--format", "json"),
                       capture_output=True, text=True, env=cli_env(), timeout=120, check=False)
    assert r.returncode == 2
    ok, bad = json.loads(r.stdout)["files"]
    assert ok["error"] is None and ok["tensors"][0]["name"] == "attn_mask"
    assert ok["tensors"][0]["pattern"] == ["causal"]
    assert "overlap" in bad["error"]
