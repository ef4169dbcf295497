"""inspect/replay edges: replay judges a mask file as inspect does, output-file errors name
the path, --key that matches nothing is a usage error (not an unreadable file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "maskcheck", *args], capture_output=True,
                          text=True, timeout=180, env=env, check=False, cwd=ROOT)


def _codes(doc: dict[str, object]) -> list[tuple[str, list[str]]]:
    files = doc["files"]
    assert isinstance(files, list)
    return [(t["name"], [f["code"] for f in t["findings"]]) for t in files[0]["tensors"]]


def test_replay_of_a_mask_file_reports_what_inspect_reports() -> None:
    pytest.importorskip("torch")
    trap = str(FIXTURES / "sdpa_broadcast_trap.safetensors")
    inspected = run("inspect", "--api", "sdpa", "--format", "json", trap)
    replayed = run("replay", "--api", "sdpa", "--format", "json", trap)
    assert _codes(json.loads(inspected.stdout)) == [("attention_mask", ["MC031"])]
    assert _codes(json.loads(replayed.stdout)) == [("attention_mask", ["MC031"])]
    assert replayed.returncode == inspected.returncode == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_html_to_a_full_device_names_the_path() -> None:
    r = run("inspect", str(FIXTURES / "sdpa_bool_causal.safetensors"), "--html", "/dev/full")
    assert r.returncode == 2
    assert r.stderr.strip() == "maskcheck: error: cannot write /dev/full: No space left on device"


def test_key_matching_nothing_is_a_usage_error_not_an_unreadable_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"attn_mask": np.tril(np.ones((4, 4), bool))}, str(a))
    save_file({"other": np.ones((4, 4), bool)}, str(b))
    r = run("inspect", "--key", "nope", str(a), str(b))
    assert r.returncode == 2 and not r.stdout
    assert r.stderr.splitlines() == [
        f"maskcheck: error: --key matches no tensor in any of the 2 files; {a}: no tensor "
        "matches --key 'nope' (tensors here: 'attn_mask')"]
    # Where some file matches, the others were filtered out, not unreadable.
    r = run("inspect", "--key", "attn_*", "--format", "json", str(a), str(b))
    doc = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [f["path"] for f in doc["files"]] == [str(a)]
    assert doc["summary"]["unreadable"] == 0


def test_truncated_safetensors_says_so_without_a_rename_hint(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    save_file({"m": np.ones((32, 32), bool)}, str(path))
    os.truncate(path, 60)
    r = run("inspect", str(path))
    assert r.returncode == 2
    assert "but only 52 bytes follow it (truncated" in r.stdout + r.stderr
    assert "rename it" not in r.stdout + r.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--dtype", "bogus"], "--dtype takes a float dtype"),
    (["--device", "tpu"], "--device takes cpu|cuda|mps|auto (or cuda:N), not 'tpu'"),
    (["--api", "nope"], "--api takes"),
    (["--format", "xml"], "--format takes"),
])
def test_replay_rejects_options_before_importing_torch(args: list[str], message: str) -> None:
    code = ("import sys\nfrom maskcheck.cli import main\n"
            f"rc = main(['replay', 'fixtures/sdpa_bool_causal.safetensors', *{args!r}])\n"
            "print(rc, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.stdout.split() == ["2", "False"], r.stdout + r.stderr
    assert r.stderr.splitlines() == [r.stderr.splitlines()[0]]
    assert message in r.stderr


def test_a_file_name_with_a_newline_stays_on_its_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "a\nb\x1b[31m.safetensors"
    bad.write_bytes(b"junk")
    shown = str(bad).replace("\n", "\\n").replace("\x1b", "\\x1b")
    for args in (["inspect", str(bad)], ["replay", str(bad)]):
        r = run(*args)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "too short" in ln]
        assert r.returncode == 2 and len(lines) == 1 and shown in lines[0], r.stdout + r.stderr
        assert "\x1b" not in r.stdout + r.stderr


def test_replay_refuses_a_call_too_big_to_run_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "big.safetensors"
    save_file({"attn_mask": np.tril(np.ones((2048, 2048), bool))}, str(path))
    r = run("replay", "--heads", "4", str(path))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"maskcheck: error: {path}: the call has 16,777,216 attention weights (batch x heads x "
        "queries x keys); replay runs at most 8,388,608: save a slice of the batch or of the "
        "heads (or pass fewer --heads)"]
