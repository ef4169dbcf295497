"""`check --fix` and `--diff`: safe fixes only, never a file without a finding, as ruff does."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.lint.runner import find_hits, fixed_source

ROOT = Path(__file__).resolve().parents[2]
FIXABLE = (
    "import torch\n\n\n"
    "def f(n, input_ids, pad, tokenizer, texts):\n"
    '    a = torch.triu(torch.full((n, n), float("-inf")))\n'
    '    b = torch.full((n, n), float("-inf")).triu(diagonal=0)\n'
    "    keep = input_ids != pad\n"
    "    c = 1 - keep\n"
    '    enc = tokenizer(texts, return_tensors="pt")\n'
    '    d = ~enc["attention_mask"]\n'
    '    e = torch.triu(torch.full((n, n), float("-inf")), 0)  # noqa: MC503\n'
    "    return a, b, c, d, e\n"
)
FIXED_LINES = [
    '    a = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)\n',
    '    b = torch.full((n, n), float("-inf")).triu(diagonal=1)\n',
    "    c = ~keep\n",
    '    d = (enc["attention_mask"] == 0)\n',
    '    e = torch.triu(torch.full((n, n), float("-inf")), 0)  # noqa: MC503\n',
]
CODES = frozenset({"MC503", "MC512", "MC518"})


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "maskcheck", "check", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)


def test_fixes_remove_their_findings_and_keep_suppressed_ones() -> None:
    after = fixed_source(FIXABLE, CODES)
    for line in FIXED_LINES:
        assert line in after
    ast.parse(after)
    assert find_hits(after, CODES) == []


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_line_endings_survive(newline: str) -> None:
    src = FIXABLE.replace("\n", newline)
    assert fixed_source(src, CODES) == fixed_source(FIXABLE, CODES).replace("\n", newline)


def test_layout_the_edit_cannot_handle_is_left_alone() -> None:
    src = 'import torch\nm = torch.triu(\n    torch.full((4, 4), float("-inf")),\n)\n'
    assert fixed_source(src, CODES) == src  # `, diagonal=1` after the trailing comma


def test_diff_changes_nothing_and_exits_1(tmp_path: Path) -> None:
    bad, clean = tmp_path / "bad.py", tmp_path / "clean.py"
    bad.write_text(FIXABLE)
    clean.write_text("x = 1\n")
    r = cli("--diff", str(tmp_path))
    assert r.returncode == 1
    assert f"--- {bad}" in r.stdout and "+    c = ~keep" in r.stdout
    assert bad.read_text() == FIXABLE
    assert cli("--diff", str(clean)).returncode == 0


def test_fix_writes_only_files_with_fixable_findings(tmp_path: Path) -> None:
    bad, other = tmp_path / "bad.py", tmp_path / "other.py"
    bad.write_text(FIXABLE)
    other.write_text("s = scores.masked_fill(mask, -1e9)\n")  # a finding, but no safe fix
    before = other.stat().st_mtime_ns
    r = cli("--fix", str(tmp_path))
    assert r.returncode == 0  # MC501 is a warning; nothing at error severity is left
    assert "MC501" in r.stdout and "MC503" not in r.stdout
    assert bad.read_text() == fixed_source(FIXABLE, CODES)
    assert other.stat().st_mtime_ns == before


def test_rules_says_which_rules_have_a_safe_fix() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "maskcheck", "rules", "--format", "json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    rules = json.loads(r.stdout)
    assert {x["code"] for x in rules if x["safe_fix"]} == set(CODES)
