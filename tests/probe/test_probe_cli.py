"""`maskcheck probe` end to end: subprocesses on a file.py:FACTORY target, and in-process runs
of the error paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
ZOO = "tests/probe/zoo.py"


def run_cli(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "100"
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "maskcheck",
                                                          *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=False)


def test_text_report_of_a_leaking_module(tmp_path: Path) -> None:
    svg = tmp_path / "probe.svg"
    r = run_cli("probe", f"{ZOO}:missing_causal_mask", "--causal", "--seq", "5",
                "--padding-side", "right", "--svg", str(svg))
    assert r.returncode == 1, r.stderr
    out = r.stdout
    assert out.startswith(f"maskcheck probe {ZOO}:missing_causal_mask\n")
    assert "FAIL  MC070 causality (right padding)" in out
    assert "pass  MC071 pad-content (right padding)" in out
    assert "dependency of sequence" in out and "✗" in out
    assert "MC070 error future-leak" in out
    assert svg.read_text().startswith("<svg")
    assert r.stderr == ""


def test_json_shape_follows_the_contract() -> None:
    r = run_cli("probe", f"{ZOO}:sdpa_causal", "--causal", "--seq", "5", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["tool"]["name"] == "maskcheck"
    probe = doc["probe"]
    assert {"target", "intent", "window", "dtype", "device", "checks", "findings",
            "dependency"} <= set(probe)
    assert probe["target"] == f"{ZOO}:sdpa_causal" and probe["intent"] == "causal"
    assert probe["window"] is None and probe["dtype"] == "float32" and probe["device"] == "cpu"
    assert probe["findings"] == []
    for check in probe["checks"]:
        assert {"name", "status", "max_diff", "where", "message"} <= set(check)
        assert check["status"] == "pass", check
    names = {c["name"] for c in probe["checks"]}
    assert {"causality", "blind-spots", "pad-content", "batch-isolation", "padding",
            "boundaries"} == names
    dep = probe["dependency"]
    assert isinstance(dep["sequence"], int)
    assert len(dep["intended"]) == 5 and all(len(row) == 5 for row in dep["intended"])
    assert len(dep["measured"]) == 5 and all(len(row) == 5 for row in dep["measured"])
    assert doc["summary"]["error"] == 0


def test_json_findings_of_a_batch_leak() -> None:
    r = run_cli("probe", f"{ZOO}:view_instead_of_transpose", "--bidirectional", "--seq", "5",
                "--padding-side", "left", "--format", "json", "--select", "MC073")
    assert r.returncode == 1, r.stderr
    probe = json.loads(r.stdout)["probe"]
    assert [f["code"] for f in probe["findings"]] == ["MC073"]
    finding = probe["findings"][0]
    assert finding["name"] == "batch-leak" and finding["severity"] == "error"
    assert finding["where"] and all(len(w) == 3 for w in finding["where"])
    assert {c["code"] for c in probe["checks"]} == {"MC073"}


def test_without_torch_one_line_exit_2() -> None:
    code = ("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
            "from maskcheck.cli import main\n"
            f"raise SystemExit(main(['probe', '{ZOO}:sdpa_causal', '--causal']))\n")
    r = run_cli(code=code)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "pip install 'maskcheck[torch]'" in r.stderr


@pytest.mark.parametrize(("target", "problem"), [
    ("tests/probe/no_such_file.py:make", "no such file tests/probe/no_such_file.py"),
    (f"{ZOO}:no_such_factory", "has no attribute 'no_such_factory'"),
    ("maskcheck_no_such_package.module:make", "cannot import maskcheck_no_such_package"),
    ("no-colon-here", "a target is file.py:FACTORY"),
    (f"{ZOO}:E", "E is not callable"),
    (f"{ZOO}:returns_a_number", "the factory returned int"),
    (f"{ZOO}:noisy", "not deterministic: the same batch gives outputs"),
])
def test_unusable_target_is_one_line_exit_2(target: str, problem: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", target, "--causal"]) == 2
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1 and "Traceback" not in err


def test_target_with_a_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def make(:\n")
    assert main(["probe", f"{bad}:make", "--causal"]) == 2
    err = capsys.readouterr().err
    assert "SyntaxError at line 1" in err and err.count("\n") == 1


def test_target_failing_on_the_first_batch(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "mean.py"
    bad.write_text("def make():\n    return lambda x, keep: x.mean(1)\n")
    assert main(["probe", f"{bad}:make", "--causal"]) == 2
    err = capsys.readouterr().err
    assert "fails on the first probe batch" in err and "expected (N, L, ...)" in err


def test_target_raising_on_one_batch_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["probe", f"{ZOO}:raises_on_length_one", "--causal", "--seq", "4",
                 "--padding-side", "right", "--format", "json"])
    probe = json.loads(capsys.readouterr().out)["probe"]
    assert code == 0
    status = {c["name"]: c["status"] for c in probe["checks"]}
    assert status.pop("boundaries") == "error"
    assert set(status.values()) == {"pass"}


@pytest.mark.parametrize("args", [[], ["--causal", "--bidirectional"],
                                  ["--causal", "--dtype", "float64"],
                                  ["--causal", "--pad", "8"],
                                  ["--causal", "--padding-side", "top"]])
def test_bad_options_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", f"{ZOO}:sdpa_causal", *args]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_rules_and_explain_know_the_probe_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--format", "json"]) == 0
    rules = {r["code"]: r for r in json.loads(capsys.readouterr().out)}
    for code in ("MC070", "MC071", "MC072", "MC073", "MC074", "MC075", "MC076", "MC077"):
        assert rules[code]["kind"] == "probe" and rules[code]["severity"] == "error"
    assert main(["explain", "MC070"]) == 0
    text = capsys.readouterr().out
    assert "future-leak (MC070)" in text and "maskcheck probe" in text


def test_maskcheck_probe_is_lazy_and_callable() -> None:
    code = ("import sys, maskcheck\n"
            "from maskcheck.rules.registry import all_rules\n"
            "codes = [r.code for r in all_rules() if r.kind == 'probe']\n"
            "print(callable(maskcheck.probe), 'torch' in sys.modules, len(codes))\n")
    r = run_cli(code=code)
    assert r.stdout.split() == ["True", "False", "8"], r.stderr


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--causal", "--bidirectional", "--window", "--positions", "--padding-side"):
        assert option in out
