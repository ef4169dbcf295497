"""`maskcheck inspect` run as a subprocess on real safetensors files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from maskcheck import __version__


def _io_ready() -> bool:
    try:
        from maskcheck.io import expand_paths, open_file  # noqa: F401
    except ImportError:
        return False
    return True


# These run the real loaders and analysis (maskcheck.io, maskcheck.analysis).
needs_io = pytest.mark.skipif(not _io_ready(), reason="maskcheck.io loaders not in the tree yet")
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    full_env.pop("COLUMNS", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "maskcheck", "inspect", *args],
        capture_output=True, text=True, env=full_env, timeout=120, check=False,
    )


def padded_causal(tmp_path: Path, side: str = "right") -> Path:
    lengths, n = [6, 3], 6
    keep = np.zeros((2, n), bool)
    for i, k in enumerate(lengths):
        if side == "right":
            keep[i, :k] = True
        else:
            keep[i, n - k :] = True
    mask = np.tril(np.ones((n, n), bool))[None, None] & keep[:, None, None, :]
    path = tmp_path / f"{side}.safetensors"
    save_file({"attn_mask": mask}, str(path), metadata={"made_by": "test"})
    return path


def all_padding(tmp_path: Path) -> Path:
    kpm = np.zeros((3, 5), bool)
    kpm[0, 3:] = True
    kpm[1, :] = True  # a sequence that is all padding: MC002 error
    path = tmp_path / "kpm.safetensors"
    save_file({"key_padding_mask": kpm}, str(path))
    return path


def test_bad_api_is_a_usage_error(tmp_path: Path) -> None:
    r = run(str(tmp_path / "x.safetensors"), "--api", "keras")
    assert r.returncode == 2
    assert "--api takes" in r.stderr and "keras" in r.stderr
    assert r.stdout == ""


def test_unknown_rule_code_is_a_usage_error(tmp_path: Path) -> None:
    r = run(str(tmp_path / "x.safetensors"), "--select", "MC999")
    assert r.returncode == 2 and "MC999" in r.stderr


def test_bad_fail_on_and_dtype_are_usage_errors(tmp_path: Path) -> None:
    assert run(str(tmp_path / "x"), "--fail-on", "fatal").returncode == 2
    r = run(str(tmp_path / "x"), "--dtype", "int8")
    assert r.returncode == 2 and "--dtype" in r.stderr


@needs_io
def test_text_report_of_padded_causal_mask(tmp_path: Path) -> None:
    path = padded_causal(tmp_path, "right")
    r = run(str(path), "--api", "sdpa", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"{path}  1 tensor, 1 metadata key" in out
    row = next(line for line in out.splitlines() if line.startswith("attn_mask "))
    for cell in ("bool[2,1,6,6]", "bool-true-keep", "attn_mask", "causal, padding-right"):
        assert cell in row
    assert "attn_mask[0, 0]  6 queries x 6 keys" in out
    assert "█ kept  · masked" in out
    assert "padded keys per sequence (right): 0, 3" in out
    assert out.rstrip().splitlines()[-1].startswith("1 file, 1 tensor: 0 errors")
    assert "\x1b[" not in out  # not a terminal: no escape codes
    assert all(line == line.rstrip() for line in out.splitlines())


@needs_io
def test_errors_fail_and_are_located(tmp_path: Path) -> None:
    r = run(str(all_padding(tmp_path)))
    assert r.returncode == 1
    assert "MC002 fully-masked-row  sequence 1" in r.stdout
    assert re.search(r"^\s+1  (· ){5} ✗$", r.stdout, re.M)


@needs_io
def test_fail_on_warning_and_ignore(tmp_path: Path) -> None:
    left = padded_causal(tmp_path, "left")  # MC002 as info (pad query rows, issue 9)
    assert run(str(left), "--api", "sdpa").returncode == 0
    assert run(str(left), "--api", "sdpa", "--fail-on", "warning").returncode == 0
    assert run(str(left), "--api", "sdpa", "--fail-on", "info").returncode == 1
    r = run(str(left), "--api", "sdpa", "--fail-on", "info", "--ignore", "MC002")
    assert r.returncode == 0 and "MC002" not in r.stdout


@needs_io
def test_json_is_the_contract_and_alone_on_stdout(tmp_path: Path) -> None:
    r = run(str(all_padding(tmp_path)), "--format", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    assert doc["tool"] == {"name": "maskcheck", "version": __version__}
    (tensor,) = doc["files"][0]["tensors"]
    assert tensor["name"] == "key_padding_mask" and tensor["shape"] == [3, 5]
    assert tensor["convention"] == "bool-true-masked"
    mc002 = next(f for f in tensor["findings"] if f["code"] == "MC002")
    assert mc002["severity"] == "error" and mc002["where"] == [[1]]
    assert doc["summary"]["files"] == 1 and doc["summary"]["error"] >= 1


@needs_io
def test_unreadable_file_is_one_line_and_others_still_reported(tmp_path: Path) -> None:
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    good = padded_causal(tmp_path)
    r = run(str(broken), str(good))
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(str(broken))]
    assert len(lines) == 1 and lines[0].startswith(f"{broken}: ")
    assert "attn_mask" in r.stdout
    assert "1 unreadable file" in r.stdout


@needs_io
def test_narrow_and_no_color_and_width(tmp_path: Path) -> None:
    path = all_padding(tmp_path)
    narrow = run(str(path), env={"COLUMNS": "60", "NO_COLOR": "1"})
    # every line fits, except the file header: a path is never broken
    assert all(len(line) <= 60 for line in narrow.stdout.splitlines()
               if not line.startswith(str(path)))
    assert "MC002" in narrow.stdout and "\x1b[" not in narrow.stdout
    wide = run(str(path), "--width", "160")
    assert any(line.startswith("key_padding_mask ") and "bool[3,5]" in line
               for line in wide.stdout.splitlines())


@needs_io
def test_no_picture_and_svg_html(tmp_path: Path) -> None:
    path = all_padding(tmp_path)
    svg, html = tmp_path / "r.svg", tmp_path / "r.html"
    r = run(str(path), "--no-picture", "--svg", str(svg), "--html", str(html))
    assert r.returncode == 1
    assert "sequences x" not in r.stdout
    assert svg.read_text().startswith("<svg") and "MC002" in svg.read_text()
    assert "MC002" in html.read_text()


@needs_io
def test_key_glob_picks_tensors(tmp_path: Path) -> None:
    path = tmp_path / "two.safetensors"
    save_file({"enc.key_padding_mask": np.zeros((2, 4), bool),
               "enc.weight": np.ones((4, 4), np.float32)}, str(path))
    r = run(str(path), "--key", "*padding*", "--format", "json")
    names = [t["name"] for t in json.loads(r.stdout)["files"][0]["tensors"]]
    assert names == ["enc.key_padding_mask"]
