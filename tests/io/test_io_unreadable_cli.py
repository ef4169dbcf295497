"""An unreadable file among good ones, checked as a user that file modes apply to."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from conftest import cli_env, maskcheck_cmd
from safetensors.numpy import save_file


def _good(path: Path) -> Path:
    save_file({"m": np.tril(np.ones((6, 6), bool))}, str(path))
    path.chmod(0o644)
    return path


def test_unreadable_file_is_one_line_and_the_good_ones_are_inspected(
        shared_dir: Path, as_nobody: list[str]) -> None:
    good_a, good_b = _good(shared_dir / "a.safetensors"), _good(shared_dir / "c.safetensors")
    locked = _good(shared_dir / "b.safetensors")
    locked.chmod(0)
    r = subprocess.run([*as_nobody, *maskcheck_cmd(
        "inspect", "--format", "json", str(good_a), str(locked), str(good_b))],
        capture_output=True, text=True, env=cli_env(), cwd="/", timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    files = {f["path"]: f for f in json.loads(r.stdout)["files"]}
    assert files[str(locked)]["error"] == "permission denied (cannot open for reading)"
    for good in (good_a, good_b):
        assert files[str(good)]["error"] is None and files[str(good)]["tensors"]
    text = subprocess.run([*as_nobody, *maskcheck_cmd(
        "inspect", "--no-picture", str(good_a), str(locked))], capture_output=True, text=True,
        env={**cli_env(), "COLUMNS": "200"}, cwd="/", timeout=120, check=False)
    lines = [ln for ln in (text.stdout + text.stderr).splitlines() if "permission denied" in ln]
    assert text.returncode == 2 and len(lines) == 1 and str(locked) in lines[0]
    assert "Usage" not in text.stdout + text.stderr
