"""`maskcheck rules` and `maskcheck explain` as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from maskcheck.rules.registry import all_rules

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "maskcheck", *args], capture_output=True,
                          text=True, env=full_env, timeout=60, check=False)


def test_rules_table_lists_every_rule() -> None:
    r = run("rules", env={"COLUMNS": "140"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["code", "name", "severity", "kind", "fix", "summary"]
    for rule in all_rules():
        row = next(line for line in lines if line.startswith(rule.code + " "))
        assert rule.name in row and rule.severity.value in row


def test_rules_narrow_terminal_lists_every_rule() -> None:
    r = run("rules", env={"COLUMNS": "60"})
    assert r.returncode == 0
    assert all(len(line) <= 60 for line in r.stdout.splitlines())
    assert "MC002  error   fully-masked-row  (mask)" in r.stdout


def test_rules_json_has_every_field() -> None:
    r = run("rules", "--format", "json")
    doc = json.loads(r.stdout)
    assert [d["code"] for d in doc] == [rule.code for rule in all_rules()]
    mc002 = next(d for d in doc if d["code"] == "MC002")
    assert set(mc002) == {"code", "name", "severity", "kind", "summary", "explanation", "bad",
                          "good", "fix", "safe_fix"}
    assert mc002["name"] == "fully-masked-row" and mc002["severity"] == "error"


def test_explain_in_the_style_of_ruff_rule() -> None:
    r = run("explain", "MC002")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("# fully-masked-row (MC002)\n")
    sections = ["## What it does", "## Why is this bad?", "## Example", "Use instead:", "## Fix"]
    positions = [out.index(s) for s in sections]
    assert positions == sorted(positions)
    assert "```python\n" in out
    assert "\x1b[" not in out


def test_explain_accepts_a_rule_name_and_lower_case_code() -> None:
    by_name = run("explain", "fully-masked-row").stdout
    assert by_name == run("explain", "mc002").stdout
    assert by_name.startswith("# fully-masked-row (MC002)")


def test_explain_unknown_rule_is_a_usage_error() -> None:
    r = run("explain", "MC999")
    assert r.returncode == 2
    assert "unknown rule 'MC999'" in r.stderr and r.stdout == ""


def test_explain_json() -> None:
    doc = json.loads(run("explain", "MC050", "--format", "json").stdout)
    assert doc["code"] == "MC050" and doc["name"] == "dense-causal-mask"


def test_explain_mc002_says_the_severity_check_gives_pad_query_rows(tmp_path: Path) -> None:
    import numpy as np

    # a left-padded causal float mask (HF eager style): sequence 0 has 2 pad tokens
    length = 6
    mask = np.zeros((2, 1, length, length), np.float32)
    for b, pad in enumerate((2, 0)):
        keep = np.tril(np.ones((length, length), bool))
        keep[:, :pad] = False
        mask[b, 0][~keep] = np.finfo(np.float32).min
    path = tmp_path / "causal_mask.npy"
    np.save(path, mask)
    check = run("check", "--format", "json", str(path))
    (finding,) = json.loads(check.stdout)["files"][0]["tensors"][0]["findings"]
    assert (finding["code"], finding["severity"]) == ("MC002", "info")
    assert "pad query rows" in finding["message"]
    explained = " ".join(run("explain", "MC002").stdout.split())
    assert "those are reported as info" in explained
    assert "as a warning" not in explained


def test_explain_says_which_findings_fix_rewrites(tmp_path: Path) -> None:
    # -inf written through triu_indices is MC503 too, and --fix never rewrites it
    source = tmp_path / "model.py"
    source.write_text("import torch\n\n\ndef attend(x, n):\n    idx = torch.triu_indices(n, n)\n"
                      "    x[:, idx[0], idx[1]] = float('-inf')\n    return x\n")
    found = run("check", str(source))
    assert found.returncode == 1 and ": MC503 triu_indices" in found.stdout
    diff = run("check", "--diff", str(source))
    assert (diff.returncode, diff.stdout) == (0, "")
    mc503 = run("explain", "MC503").stdout
    assert "Fix is always available" not in mc503
    fix_line = mc503.splitlines()[-1]
    assert fix_line.startswith("Fix is sometimes available") and "triu_indices" in fix_line
    assert "Fix is sometimes available" in run("explain", "MC512").stdout
    for rule in all_rules():
        if rule.safe_fix:
            text = run("explain", rule.code).stdout
            assert ("Fix is sometimes available" in text) == bool(rule.fix_covers), rule.code
