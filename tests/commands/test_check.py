"""`maskcheck check` through the real CLI (subprocess) and the Typer-free entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from maskcheck.commands.check import main as check_main

ROOT = Path(__file__).resolve().parents[2]
LINT_FIXTURES = ROOT / "tests" / "lint" / "fixtures"
BAD = (
    "import torch\n"
    "s = scores.masked_fill(mask, -1e9)\n"
    'm = torch.triu(torch.full((n, n), float("-inf")), diagonal=0)\n'
)
CLEAN = 'import torch\nm = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)\n'


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # also when run from a temporary cwd
    return subprocess.run([sys.executable, "-m", "maskcheck", "check", *args],
                          capture_output=True, text=True, cwd=cwd or ROOT, timeout=120, env=env)


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(BAD)
    return path


def test_concise_output_and_exit_code(bad: Path) -> None:
    r = cli(str(bad))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{bad}:2:30: MC501 ")
    assert lines[1].startswith(f"{bad}:3:5: MC503 ")
    assert lines[-1] == "Found 2 problems (1 error, 1 warning) in 1 file."


def test_summary_counts_are_plural_past_one(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(BAD + "t = scores.masked_fill(mask, -1e9)\n"
                    'u = torch.triu(torch.full((n, n), float("-inf")), diagonal=0)\n')
    r = cli(str(path))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1] == "Found 4 problems (2 errors, 2 warnings) in 1 file."


def test_clean_file_exits_zero(tmp_path: Path) -> None:
    path = tmp_path / "ok.py"
    path.write_text(CLEAN)
    r = cli(str(path))
    assert (r.returncode, r.stdout.strip()) == (0, "All checks passed (1 file).")


def test_check_of_sources_imports_neither_torch_nor_numpy(bad: Path) -> None:
    code = (
        "import sys\nfrom maskcheck.cli import main\n"
        f"rc = main(['check', {str(bad)!r}])\n"
        "print('MODULES', rc, 'torch' in sys.modules, 'numpy' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.splitlines()[-1] == "MODULES 1 False False", r.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ((), 1),
        (("--fail-on", "warning"), 1),
        (("--select", "MC501"), 0),  # only a warning left; fails at error by default
        (("--select", "MC501", "--fail-on", "warning"), 1),
        (("--ignore", "MC503,MC501"), 0),
        (("--select", "MC501", "--extend-select", "triu-diagonal-zero"), 1),
        (("--exit-zero",), 0),
    ],
)
def test_selection_and_fail_on(bad: Path, args: tuple[str, ...], code: int) -> None:
    assert check_main([*args, str(bad)]) == code


@pytest.mark.parametrize(
    "args",
    [("--select", "MC999"), ("--ignore", "nonsense"), ("--fail-on", "loud"),
     ("--format", "xml"), ("--api", "keras"), ("--select", ""), ("--extend-select", " ,")],
)
def test_usage_errors_exit_2(bad: Path, args: tuple[str, ...]) -> None:
    r = cli(*args, str(bad))
    assert r.returncode == 2
    assert r.stderr.startswith("maskcheck: error:") and "Traceback" not in r.stderr


def test_a_missing_path_is_one_line_and_the_rest_is_checked(bad: Path) -> None:
    missing = bad.parent / "nope.py"
    r = cli(str(missing), str(bad), str(missing))
    assert r.returncode == 2 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines.count(f"{missing}: error: no such file or directory") == 1
    assert f"{bad}:2:30: MC501 " in r.stdout  # the file named after it is still checked
    assert lines[-1].endswith("1 could not be read.")
    j = cli("--format", "json", str(bad), str(missing))
    assert j.returncode == 2
    files = {f["path"]: f for f in json.loads(j.stdout)["files"]}
    assert files[str(missing)]["error"] == "no such file or directory"
    assert files[str(bad)]["findings"]
    # --exit-zero does not hide an input that could not be read
    assert cli("--exit-zero", str(bad), str(missing)).returncode == 2


def test_unreadable_sources_are_reported_and_the_rest_checked(tmp_path: Path, bad: Path) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n    x.masked_fill(m, -1e9)\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xff'\n")
    (tmp_path / "blob.py").write_bytes(b"\x00\x01\x02")
    r = cli(str(tmp_path))
    assert r.returncode == 2
    out = r.stdout
    assert f"{tmp_path / 'broken.py'}: error: syntax error at line 1" in out
    assert f"{tmp_path / 'latin.py'}: error: not UTF-8 text" in out
    assert f"{tmp_path / 'blob.py'}: error: binary file" in out
    assert f"{bad}:2:30: MC501" in out
    # the count is of the files that were read: bad, plus nothing else
    assert out.splitlines()[-1] == ("Found 2 problems (1 error, 1 warning) in 1 file; "
                                    "3 could not be read.")


def test_summary_never_says_all_checks_passed_when_a_file_was_not_read(tmp_path: Path) -> None:
    latin = tmp_path / "bad_latin1.py"
    latin.write_bytes(b"x = '\xe9'\n")
    clean = tmp_path / "clean.py"
    clean.write_text(CLEAN)
    alone = cli(str(latin))
    assert alone.returncode == 2
    assert alone.stdout.splitlines() == [
        f"{latin}: error: not UTF-8 text (byte 0xe9 at offset 5)",
        "No problems found in 0 files; 1 could not be read."]
    both = cli(str(latin), str(clean))
    assert both.returncode == 2
    assert both.stdout.splitlines()[-1] == "No problems found in 1 file; 1 could not be read."
    stats = cli("--statistics", str(latin), str(clean))
    assert stats.stdout.splitlines()[-1] == "No problems found in 1 file; 1 could not be read."
    assert cli(str(clean)).stdout == "All checks passed (1 file).\n"


def test_json_has_the_contract_shape(bad: Path) -> None:
    r = cli("--format", "json", str(bad))
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["tool"]["name"] == "maskcheck"
    (entry,) = doc["files"]
    assert entry["path"] == str(bad) and entry["error"] is None and entry["tensors"] == []
    assert [(f["code"], f["line"], f["col"]) for f in entry["findings"]] == [
        ("MC501", 2, 30), ("MC503", 3, 5)]
    assert doc["summary"]["error"] == 1 and doc["summary"]["warning"] == 1
    assert r.stderr == ""


def _check_sarif(doc: dict[str, Any]) -> None:
    """The parts of the SARIF 2.1.0 schema that code scanning reads, checked by hand."""
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert {"name", "version", "informationUri", "rules"} <= driver.keys()
    ids = [rule["id"] for rule in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        assert isinstance(rule["name"], str)
        for key in ("shortDescription", "fullDescription", "help"):
            assert isinstance(rule[key]["text"], str) and rule[key]["text"]
        assert rule["defaultConfiguration"]["level"] in {"none", "note", "warning", "error"}
    for result in run["results"]:
        assert result["ruleId"] == ids[result["ruleIndex"]]
        assert result["level"] in {"none", "note", "warning", "error"}
        assert result["message"]["text"]
        (loc,) = result["locations"]
        physical = loc["physicalLocation"]
        assert physical["artifactLocation"]["uri"]
        assert physical["region"]["startLine"] >= 1
        assert physical["region"].get("startColumn", 1) >= 1


def test_sarif_is_valid_2_1_0_with_a_rule_and_line_per_result(bad: Path) -> None:
    mask = ROOT / "fixtures" / "causal_diagonal_masked.safetensors"
    r = cli("--format", "sarif", str(bad), str(mask))
    doc = json.loads(r.stdout)
    _check_sarif(doc)
    results = doc["runs"][0]["results"]
    assert {x["ruleId"] for x in results} >= {"MC501", "MC503", "MC040"}
    src = next(x for x in results if x["ruleId"] == "MC501")
    region = src["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (2, 30)
    assert src["level"] == "warning"


def test_sarif_notebook_results_have_a_region_within_the_cell(tmp_path: Path,
                                                              bad: Path) -> None:
    # GitHub code scanning rejects a result whose physicalLocation has no region.startLine
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# notes\n"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import torch\n", "x = 1\n",
                         "s = scores.masked_fill(mask, -1e9)\n"]}]
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5}))
    doc = json.loads(cli("--format", "sarif", str(nb), str(bad)).stdout)
    _check_sarif(doc)
    results = doc["runs"][0]["results"]
    cell = next(x for x in results if x["locations"][0].get("logicalLocations"))
    (location,) = cell["locations"]
    assert location["physicalLocation"]["region"] == {"startLine": 3, "startColumn": 30}
    assert location["logicalLocations"] == [{"name": "cell 2", "kind": "module"}]
    assert cell["properties"] == {"cell": 2, "line": 3, "column": 30}
    assert cell["message"]["text"].startswith("cell 2, line 3: ")
    # a .py result has the same shape of region
    src = next(x for x in results if x["ruleId"] == "MC501" and x is not cell)
    assert src["locations"][0]["physicalLocation"]["region"] == {"startLine": 2,
                                                                 "startColumn": 30}


def test_sarif_reports_unreadable_files_as_notifications(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n    x.masked_fill(m, -1e9)\n")
    r = cli("--format", "sarif", str(tmp_path))
    doc = json.loads(r.stdout)
    _check_sarif(doc)
    invocation = doc["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "syntax error" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    assert r.returncode == 2


def test_github_annotations(bad: Path) -> None:
    r = cli("--format", "github", str(bad))
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"::warning file={bad},line=2,col=30,title=maskcheck (MC501)::")
    assert lines[1].startswith(f"::error file={bad},line=3,col=5,title=maskcheck (MC503)::")
    assert r.returncode == 1


def test_github_annotation_of_a_syntax_error_has_its_line_and_column(tmp_path: Path) -> None:
    import re

    (tmp_path / "bad.py").write_text("import torch\n\ndef f(:\n    pass\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    r = cli("--format", "github", "bad.py", "latin.py", cwd=tmp_path)
    assert r.returncode == 2
    syntax, latin = r.stdout.splitlines()
    # the column the parser gives depends on the Python version: any column
    assert re.fullmatch(r"::error file=bad\.py,line=3,col=(\d+),title=maskcheck \(unreadable\)"
                        r"::bad\.py: syntax error at line 3, column \1: .+", syntax), syntax
    # no line is known for undecodable bytes: the annotation goes on the file
    assert latin.startswith("::error file=latin.py,title=maskcheck (unreadable)::latin.py: ")
    # SARIF's notification for it has the same region
    doc = json.loads(cli("--format", "sarif", "bad.py", cwd=tmp_path).stdout)
    (note,) = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    region = note["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == 3 and region["startColumn"] >= 1


def test_statistics(bad: Path, tmp_path: Path) -> None:
    (tmp_path / "more.py").write_text("s = x.masked_fill(m, -1e10)\n")
    r = cli("--statistics", str(tmp_path))
    assert r.stdout.splitlines()[:2] == ["2\tMC501\tlarge-negative-literal",
                                         "1\tMC503\ttriu-diagonal-zero"]


def test_pyproject_config_applies(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.maskcheck]\nignore = ["MC503"]\nfail-on = "warning"\nexclude = ["gen"]\n'
        '[tool.maskcheck.per-file-ignores]\n"tests/*" = ["MC501"]\n'
    )
    (tmp_path / "train.sh").write_text("python train.py --fp16\n")  # MC501's project gate
    for rel in ("pkg/model.py", "tests/test_model.py", "gen/model.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(BAD)
    r = cli(".", cwd=tmp_path)
    assert r.returncode == 1  # fail-on warning from the config
    codes = [line.split()[1] for line in r.stdout.splitlines()[:-1]]
    assert codes == ["MC501"]
    assert "pkg/model.py:2:30" in r.stdout
    assert check_main(["--fail-on", "error", str(tmp_path)]) == 0  # the CLI wins


def test_broken_config_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.maskcheck]\nselect = ["MC9"]\n')
    (tmp_path / "m.py").write_text(BAD)
    r = cli(str(tmp_path / "m.py"))
    assert r.returncode == 2 and "MC9" in r.stderr and "select" in r.stderr


def test_mask_files_go_through_inspect(tmp_path: Path) -> None:
    mask = ROOT / "fixtures" / "causal_diagonal_masked.safetensors"
    r = cli("--format", "json", str(mask))
    (entry,) = json.loads(r.stdout)["files"]
    codes = {f["code"] for t in entry["tensors"] for f in t["findings"]}
    assert "MC040" in codes and r.returncode == 1
    assert cli("--ignore", "MC0", str(mask)).returncode == 0


def test_other_suffix_named_explicitly_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    r = cli(str(path))
    assert r.returncode == 2 and "not a Python source, notebook or mask file" in r.stdout


def test_fixture_tree_through_cli() -> None:
    r = cli(str(LINT_FIXTURES))
    assert r.returncode == 1
    fixture_codes = {p.name.split("_")[0] for p in LINT_FIXTURES.glob("MC5*.py")}
    assert {line.split()[1] for line in r.stdout.splitlines()[:-1]} == fixture_codes


def test_a_pt_file_without_torch_says_how_to_install_it_and_under_pre_commit(
        tmp_path: Path) -> None:
    (tmp_path / "mask.pt").write_bytes(b"PK\x03\x04 not read without torch")
    script = ("import sys\nsys.modules['torch'] = None  # torch is not installed\n"
              "from maskcheck.cli import main\nraise SystemExit(main(['check', 'mask.pt']))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2
    assert r.stdout.splitlines()[0] == (
        "mask.pt: error: reading .pt files needs torch: pip install 'maskcheck[torch]' "
        "(in a pre-commit hook: additional_dependencies: [torch])")
