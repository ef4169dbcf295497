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
    "def f(n, input_ids, pad, tokenizer, texts, x):\n"
    '    a = torch.triu(torch.full((n, n), float("-inf")))\n'
    '    b = torch.full((n, n), float("-inf")).triu(diagonal=0)\n'
    "    keep = input_ids != pad\n"
    "    c = 1 - keep\n"
    '    enc = tokenizer(texts, return_tensors="pt")\n'
    '    d = ~enc["attention_mask"]\n'
    '    e = torch.triu(torch.full((n, n), float("-inf")), 0)  # noqa: MC503\n'
    "    return a, b, x.masked_fill(c, 0.0), d, e\n"
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
    fixed = len([h for h in find_hits(FIXABLE, CODES) if h.edit is not None])
    assert r.stderr == f"Fixed {fixed} problems in 1 file.\n"
    assert cli("--fix", str(tmp_path)).stderr == ""  # nothing left to fix: nothing said


def test_rules_says_which_rules_have_a_safe_fix() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "maskcheck", "rules", "--format", "json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    rules = json.loads(r.stdout)
    assert {x["code"] for x in rules if x["safe_fix"]} == set(CODES)


def test_lines_are_counted_as_the_parser_counts_them() -> None:
    # A form feed (PEP 8 allows one between sections) or U+2028 in a string is no line break
    # to the parser; the fix and the noqa must land on the reported line all the same.
    src = ('import torch\n\x0c\n\ndef f(scores, mask):\n    scores = scores.half()\n'
           '    s = "\u2028"\n'
           '    a = scores.masked_fill(mask, -1e9)  # noqa: MC501\n'
           '    m = torch.triu(torch.full((3, 3), float("-inf")))\n    return a, m, s\n')
    after = fixed_source(src, CODES)
    assert after == src.replace('float("-inf")))', 'float("-inf")), diagonal=1)')
    assert [h.code for h in find_hits(src, frozenset({"MC501", "MC503"}))] == ["MC503"]


def test_a_noqa_inside_a_string_is_not_a_comment() -> None:
    src = ('def f(scores, mask):\n    scores = scores.half()\n'
           '    s = "x = 1  # noqa"; a = scores.masked_fill(mask, -1e9)\n'
           '    print("# maskcheck: ignore[MC501]"); b = scores.masked_fill(mask, -1e9)\n'
           '    return a, b, s\n')
    assert [h.line for h in find_hits(src, frozenset({"MC501"}))] == [3, 4]


def test_triu_with_keyword_arguments_unpacked_is_not_judged() -> None:
    src = ('import torch\n\n\ndef f(n, **kw):\n'
           '    return torch.triu(torch.full((n, n), float("-inf")), **kw)\n')
    assert find_hits(src, CODES) == []
    assert fixed_source(src, CODES) == src


@pytest.mark.parametrize(("use", "fixed"), [
    ("x.masked_fill(1 - keep, 0.0)", "x.masked_fill(~keep, 0.0)"),
    ("torch.where(1 - keep, x, 0.0)", "torch.where(~keep, x, 0.0)"),
    ("x * (1 - keep)", "x * (~keep)"),
    ("(1 - keep) & keep", "(~keep) & keep"),
    # `-(~keep)` and `~keep - x` raise too, and `~keep * -inf` is NaN: no fix offered there
    ("-(1 - keep) * 10000.0", None),
    ("1 - keep - x", None),
    ("(1 - keep) * float('-inf')", None),
])
def test_mc512_fix_only_where_a_bool_can_stand(use: str, fixed: str | None) -> None:
    src = (f"import torch\n\n\ndef f(ids, pad, x):\n    keep = ids != pad\n"
           f"    return {use}\n")
    assert "MC512" in {h.code for h in find_hits(src, CODES)}
    after = fixed_source(src, CODES)
    assert after == (src if fixed is None else src.replace(use, fixed))


def test_mc512_fix_of_a_name_read_only_as_a_bool() -> None:
    head = "import torch\n\n\ndef f(ids, pad, x):\n    keep = ids != pad\n    inv = 1 - keep\n"
    as_bool = head + "    return x.masked_fill(inv, 0.0)\n"
    assert fixed_source(as_bool, CODES) == as_bool.replace("1 - keep", "~keep")
    as_number = head + "    return x - inv\n"  # `x - ~keep` would raise: no fix
    assert fixed_source(as_number, CODES) == as_number


def test_one_edit_that_would_not_parse_leaves_the_others() -> None:
    src = ('import torch\n'
           'a = torch.triu(torch.full((4, 4), float("-inf")))\n'
           'm = torch.triu(\n    torch.full((4, 4), float("-inf")),\n)\n')
    after = fixed_source(src, CODES)
    assert after == src.replace('float("-inf")))\n', 'float("-inf")), diagonal=1)\n', 1)


def test_diff_reports_unreadable_files_and_exits_2(tmp_path: Path) -> None:
    bad, broken = tmp_path / "bad.py", tmp_path / "broken.py"
    bad.write_text(FIXABLE)
    broken.write_text("def f(:\n")
    r = cli("--diff", str(tmp_path))
    assert r.returncode == 2
    assert "+    c = ~keep" in r.stdout
    assert f"{broken}: error: syntax error at line 1" in r.stderr
    assert bad.read_text() == FIXABLE


def test_diff_takes_no_machine_format(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(FIXABLE)
    r = cli("--diff", "--format", "json", str(bad))
    assert r.returncode == 2 and r.stdout == ""
    assert "--diff" in r.stderr


def test_stubs_scripts_and_declared_encodings_are_fixed(tmp_path: Path) -> None:
    stub, latin = tmp_path / "bad.pyi", tmp_path / "latin.py"
    stub.write_text(FIXABLE)
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + FIXABLE.encode())
    assert cli("--fix", str(stub), str(latin)).returncode == 0
    assert stub.read_text() == fixed_source(FIXABLE, CODES)
    assert latin.read_bytes() == (b"# -*- coding: latin-1 -*-\n# caf\xe9\n"
                                  + fixed_source(FIXABLE, CODES).encode())


def test_fix_says_it_leaves_notebooks_alone(tmp_path: Path) -> None:
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["import torch\n",
                       'm = torch.triu(torch.full((4, 4), float("-inf")))\n']}
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5}))
    before = nb.read_bytes()
    r = cli("--fix", str(nb))
    assert r.returncode == 1 and "MC503" in r.stdout
    assert f"{nb}: not edited: --fix does not rewrite notebooks (1 finding" in r.stderr
    assert nb.read_bytes() == before


@pytest.mark.parametrize("use", ["x.masked_fill(1 - keep, 0.0)", "torch.where(1 - keep, x, 0.0)",
                                 "x * (1 - keep)", "(1 - keep) & keep"])
def test_mc512_fix_computes_what_1_minus_an_int_mask_would(use: str) -> None:
    torch = pytest.importorskip("torch")
    src = (f"import torch\n\n\ndef f(ids, pad, x):\n    keep = ids != pad\n"
           f"    return {use}\n")
    fixed: dict[str, object] = {}
    exec(compile(fixed_source(src, CODES), "<fixed>", "exec"), fixed)
    ids, x = torch.tensor([[5, 7, 0, 0]]), torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    got = fixed["f"](ids, 0, x)  # type: ignore[operator]
    keep = ids != 0
    inverse = 1 - keep.int()  # what the author meant by `1 - keep`
    intended = {"x.masked_fill(1 - keep, 0.0)": x.masked_fill(inverse.bool(), 0.0),
                "torch.where(1 - keep, x, 0.0)": torch.where(inverse.bool(), x, 0.0),
                "x * (1 - keep)": x * inverse,
                "(1 - keep) & keep": inverse.bool() & keep}[use]
    assert torch.equal(got, intended)


@pytest.mark.parametrize(("comment", "silenced"), [
    ("# maskcheck: ignore", True),
    ("# maskcheck: ignore[MC501]", True),
    ("# maskcheck: ignore[MC503]", False),
    ("# maskcheck: ignored by hand", False),
    ("# maskcheck: ignore-me", False),
])
def test_bare_maskcheck_ignore_silences_the_line(comment: str, silenced: bool) -> None:
    src = ("def f(scores, mask):\n    scores = scores.half()\n"
           f"    return scores.masked_fill(mask, -1e9)  {comment}\n")
    assert (find_hits(src, frozenset({"MC501"})) == []) is silenced
