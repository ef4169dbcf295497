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
    assert rc == 1, err  # MC002/MC062 on the right masks: the rows with no key fail it
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


# --------------------------------------------------------------- judged against the meant mask


def _additive(value: str) -> dict[str, object]:
    rc, out, _ = run_main("simulate", "--seq", "5", "--pad", "2", "--api", "sdpa-additive",
                            "--mistake", "none", "--format", "json", f"--mask-value={value}")
    doc = json.loads(out)["simulate"]
    (scen,) = doc["scenarios"]
    return {"rc": rc, "scenario": scen}


@pytest.mark.parametrize(("value", "code", "status"), [
    ("5", "MC063", "ok"), ("0", "MC063", "ok"), ("-5", "MC063", "ok"),
    ("nan", "MC001", "nan"), ("inf", "MC011", "nan"), ("1e400", "MC011", "nan"),
])
def test_a_bad_mask_value_is_judged_against_the_mask_that_was_meant(
        value: str, code: str, status: str) -> None:
    got = _additive(value)
    scen = got["scenario"]
    assert isinstance(scen, dict)
    kernels = [r for r in scen["runs"] if r["path"] != "reference"]
    assert kernels and all(r["status"] == status for r in kernels), scen
    if status == "ok":  # the weight lands on the padded keys
        assert all(r["masked_weight"] > 1e-3 for r in kernels)
    assert code in [f["code"] for f in scen["findings"]]
    assert got["rc"] == 1
    compile(scen["code"], "<snippet>", "exec")  # the printed code is valid Python
    if value in ("inf", "1e400"):
        assert "float('inf')" in scen["code"]
        assert any("not negative" in v for v in scen["verdict"])
    if value == "1e400":
        assert any("too big for a float: float('inf') is run" in v for v in scen["verdict"])


@pytest.mark.parametrize("value", ["-inf", "finfo", "-1e9"])
def test_a_good_mask_value_passes(value: str) -> None:
    got = _additive(value)
    scen = got["scenario"]
    assert isinstance(scen, dict)
    assert got["rc"] == 0 and scen["verdict"] == []
    assert all(f["severity"] == "info" for f in scen["findings"]), scen["findings"]


def test_simulate_exits_0_on_right_masks_whatever_the_mistakes_show() -> None:
    rc, out, err = run_main("simulate", "--seq", "4", "--pad", "1", "--format", "json")
    doc = json.loads(out)["simulate"]
    assert rc == 0, err
    assert any(m["findings"] for m in doc["mistakes"])  # demonstrations do not fail it


@pytest.mark.parametrize(("args", "message"), [
    (["--seq", "3000"], "--seq 3000 --batch 2 --heads 2 make 36,000,000 attention weights"),
    (["--seq", "100000"], "attention weights per call; simulate runs at most 262,144"),
    (["--dim", "100000"], "--dim takes at most 1024"),
    (["--dtype", "bogus"], "--dtype takes a float dtype"),
    (["--device", "tpu"], "--device takes cpu|cuda|mps|auto"),
    (["--mistake", "bogus"], "--mistake takes all, none"),
])
def test_sizes_and_options_are_refused_in_one_line_before_torch(args: list[str],
                                                                 message: str) -> None:
    code = ("import sys\nfrom maskcheck.cli import main\n"
            f"rc = main(['simulate', *{args!r}])\n"
            "print(rc, 'torch' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.stdout.split() == ["2", "False"], res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("maskcheck: error: ") and message in lines[0]


def test_long_sequences_are_drawn_downsampled() -> None:
    rc, out, _ = run_main("simulate", "--seq", "64", "--pad", "20", "--api", "sdpa",
                          "--mistake", "none", "--width", "100")
    assert rc == 0
    assert "each cell = 2x2" in out
    assert len(out.splitlines()) < 120  # 64 rows drawn per picture would be over 130
    assert max(len(line) for line in out.splitlines()) <= 100


def test_a_right_mask_torch_refuses_to_build_fails_the_command() -> None:
    rc, out, _ = run_main("simulate", "--dtype", "float16", "--mask-value", "-1e9", "--pad", "1",
                          "--api", "sdpa-additive", "--mistake", "none", "--format", "json")
    (scen,) = json.loads(out)["simulate"]["scenarios"]
    assert rc == 1 and "cannot be converted to type c10::Half without overflow" in scen["error"]
