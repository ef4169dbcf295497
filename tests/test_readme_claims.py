"""Claims of the README that the code can check: counts, ranges and pasted output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from maskcheck.rules.registry import all_rules

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _source_codes() -> list[str]:
    return [r.code for r in all_rules() if r.kind == "source"]


def test_the_number_and_range_of_source_rules() -> None:
    codes = _source_codes()
    m = re.search(r"lints Python sources with (\d+)\s+static rules \((MC\d+)-(MC\d+)", README)
    assert m is not None
    assert (int(m.group(1)), m.group(2), m.group(3)) == (len(codes), codes[0], codes[-1])


def test_the_pre_commit_example_names_every_source_rule() -> None:
    (comment,) = re.findall(r"id: maskcheck +# (.*)", README)
    assert f"{_source_codes()[0]}-{_source_codes()[-1]}" in comment


def test_the_config_error_example_is_what_check_prints(tmp_path: Path) -> None:
    m = re.search(r"\$ cat pyproject.toml\n(?P<toml>(?:.+\n)+?)\$ maskcheck check \.\n"
                  r"(?P<out>maskcheck: error: (?P<path>\S+/pyproject\.toml): .*)\n", README)
    assert m is not None
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(m.group("toml"))
    (project / "model.py").write_text("x = 1\n")
    r = subprocess.run([sys.executable, "-m", "maskcheck", "check", "."], cwd=project,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and r.stdout == ""
    expected = m.group("out").replace(m.group("path"), str(project / "pyproject.toml"))
    assert r.stderr == expected + "\n"
