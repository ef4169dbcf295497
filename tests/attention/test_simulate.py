"""simulate, as a subprocess and as a library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maskcheck", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env})


def run_main(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from maskcheck.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def test_simulate_seq5_pad3_prints_every_path() -> None:
    res = run_cli("simulate", "--seq", "5", "--pad", "3", NO_COLOR="1")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for word in ("need_weights", "no_weights", "fast_path", "math", "flash", "default",
                 "reference", "eager", "torch 2.", "the right mask for sdpa"):
        assert word in out, word
    for mistake in ("MHA-convention mask", "handed to MHA", "float 0/1", "-1e9", "summed"):
        assert mistake in out, mistake
    flat = " ".join(out.split())
    assert "value cannot be converted to type c10::Half without overflow" in flat
    assert "\x1b[" not in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_simulate_narrow_left_padding_causal() -> None:
    rc, out, err = run_main("simulate", "--seq", "4", "--pad", "2", "--causal",
                            "--padding-side", "left", "--width", "60")
    assert rc == 0, err
    assert max(len(line) for line in out.splitlines()) <= 60
    # pad query rows of the left-padded causal batch: NaN with weights, zeros without
    assert "NaN" in out and "zeros" in out and "MC062" in out


def test_simulate_json_and_mistake_focus() -> None:
    rc, out, err = run_main("simulate", "--seq", "4", "--pad", "1", "--mistake",
                            "float01-into-sdpa", "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)["simulate"]
    assert doc["scenarios"] == [] and [m["name"] for m in doc["mistakes"]] == [
        "float01-into-sdpa"]
    runs = doc["mistakes"][0]["runs"]
    assert any(r["masked_weight"] and r["masked_weight"] > 0.05 for r in runs)
    assert "MC063" in {f["code"] for f in doc["mistakes"][0]["findings"]}


def test_simulate_bad_options_exit_2() -> None:
    rc, _, err = run_main("simulate", "--seq", "3", "--pad", "5")
    assert rc == 2 and "Traceback" not in err
    rc, _, err = run_main("simulate", "--mistake", "nope")
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_library_fp16_and_summed_masks() -> None:
    from maskcheck.attention.simulate import BatchSpec, simulate

    sim = simulate(BatchSpec(seq=4, pad=2, causal=True, padding_side="left"),
                   mistake="summed-finfo-min")
    (m,) = sim.mistakes
    assert "-inf cell" in m.verdict[0]
    sim = simulate(BatchSpec(seq=4, pad=1), mistake="fp16-minus-1e9")
    (m,) = sim.mistakes
    assert "without overflow" in m.verdict[0] and "-inf" in m.verdict[1]
