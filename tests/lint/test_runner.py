from __future__ import annotations

import sys
from pathlib import Path

import pytest

from maskcheck.lint.noqa import ALL, suppressions
from maskcheck.lint.runner import lint_file, lint_files, lint_source

ALL_CODES = frozenset({"MC501", "MC502", "MC503", "MC504", "MC505", "MC506"})
BAD_LINE = "s = scores.masked_fill(mask, -1e9)"


@pytest.mark.parametrize(
    ("comment", "silenced"),
    [
        ("# noqa", True),
        ("# noqa: MC501", True),
        ("# NOQA:MC501,MC503", True),
        ("# noqa: MC503", False),
        ("# noqa: E501", False),
        ("# maskcheck: ignore[MC501]", True),
        ("# maskcheck: ignore[large-negative-literal]", True),
        ("# maskcheck: ignore[MC502, MC503]", False),
        ("# a comment", False),
    ],
)
def test_inline_suppression(comment: str, silenced: bool) -> None:
    findings = lint_source(f"{BAD_LINE}  {comment}\n", ALL_CODES)
    assert (findings == []) is silenced


def test_noqa_on_last_line_of_multiline_call() -> None:
    src = "s = scores.masked_fill(\n    mask,\n    -1e9,\n)  # noqa: MC501\n"
    assert lint_source(src, ALL_CODES) != []  # the finding is on line 3, the comment on 4
    src = "s = scores.masked_fill(mask,\n    -1e9)  # noqa: MC501\n"
    assert lint_source(src, ALL_CODES) == []


def test_bare_noqa_means_everything() -> None:
    assert suppressions("x = 1  # noqa\n") == {1: ALL}


def test_selection_limits_rules() -> None:
    assert lint_source(BAD_LINE + "\n", frozenset({"MC503"})) == []
    assert [f.code for f in lint_source(BAD_LINE + "\n", frozenset({"MC501"}))] == ["MC501"]


def test_column_counts_characters_not_bytes() -> None:
    (finding,) = lint_source("é = scores.masked_fill(mask, -1e9)\n", ALL_CODES)
    assert finding.col == "é = scores.masked_fill(mask, ".index("mask,") + 7


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"def f(:\n    scores.masked_fill(m, -1e9)\n", "syntax error at line 1"),
        (b"x = '\xff\xfe'\n", "not UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "binary"),
    ],
)
def test_unreadable_source_is_reported_not_raised(
    tmp_path: Path, data: bytes, problem: str
) -> None:
    path = tmp_path / "bad.py"
    path.write_bytes(data)
    report = lint_file(str(path), ALL_CODES)
    assert report.error is not None and problem in report.error
    assert path.read_bytes() == data  # never modified


def test_latin1_cookie_is_honoured(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\ns = x.masked_fill(m, -1e9)\n")
    report = lint_file(str(path), ALL_CODES)
    assert report.error is None and [f.code for f in report.findings] == ["MC501"]


def _module(n_defs: int, hot_body: str) -> str:
    parts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(n_defs)]
    parts.insert(n_defs // 2, f"def hot(scores, mask):\n    {hot_body}\n")
    return "import torch\n\n" + "\n".join(parts)


def test_whole_file_is_linted_whatever_precedes_the_bug() -> None:
    src = _module(20, BAD_LINE)
    (finding,) = lint_source(src, ALL_CODES)
    assert src.splitlines()[finding.line - 1].strip() == BAD_LINE


SEED_BLOCK_MASK = """
def create_block_mask(n, b):
    mask = torch.zeros(n, n)
    for i in range(0, n, b):
        mask[i:i + b, i:i + b] = 0
    mask[mask == 0] = float('-inf')
    return mask
"""


def test_seed_block_mask_found_after_unrelated_code() -> None:
    src = _module(20, "return scores") + SEED_BLOCK_MASK
    assert [f.code for f in lint_source(src, ALL_CODES)] == ["MC504"]


def test_setup_line_in_another_top_level_statement_is_followed() -> None:
    src = _module(12, "return scores") + (
        "BIG = torch.full((4, 4), float('-inf'))\n" + "x = 1\n" * 12
        + "CAUSAL = torch.triu(BIG)\n")
    assert [f.code for f in lint_source(src, ALL_CODES)] == ["MC503"]


def test_code_in_strings_and_docstrings_is_never_linted() -> None:
    template = 'TEMPLATE = """\nscores = scores.masked_fill(mask, -1e9)\n"""\n'
    src = _module(20, "return scores") + template + '"""\nmask.masked_fill(m, -1e9)\n"""\n'
    assert lint_source(src, ALL_CODES) == []


@pytest.mark.parametrize("newline", ["\r", "\r\n"])
def test_cr_and_crlf_line_endings_give_the_lf_findings(newline: str) -> None:
    src = _module(10, BAD_LINE) + SEED_BLOCK_MASK
    lf = [(f.code, f.line, f.col) for f in lint_source(src, ALL_CODES)]
    other = [(f.code, f.line, f.col) for f in lint_source(src.replace("\n", newline), ALL_CODES)]
    assert other == lf and len(lf) == 2


@pytest.mark.parametrize("bomb", [
    "x = " + "-" * 100_000 + "1e9\n",
    "x = " + "(" * 5_000 + "1" + ")" * 5_000 + "  # -1e9\n",
    "x = [" + "-1e9, " * 10 + "]\n" + "# " + "y" * (9 * 1024 * 1024) + "\n",
])
def test_parser_bombs_are_one_line_errors(tmp_path: Path, bomb: str) -> None:
    path = tmp_path / "bomb.py"
    path.write_text(bomb)
    report = lint_file(str(path), ALL_CODES)
    assert report.findings == [] and report.error is not None
    assert "\n" not in report.error


def test_every_file_is_parsed_whatever_it_holds(tmp_path: Path) -> None:
    # no text test decides first: a broken file is an error line even with nothing to match
    path = tmp_path / "plain.py"
    path.write_text("def f(:\n")
    assert lint_file(str(path), frozenset({"MC503"})).error == (
        "syntax error at line 1, column 7: invalid syntax")


def test_parallel_results_keep_order(tmp_path: Path) -> None:
    items = []
    for i in range(60):
        p = tmp_path / f"m{i:02d}.py"
        p.write_text(BAD_LINE + "\n" if i % 3 == 0 else "x = 1\n")
        items.append((str(p), ALL_CODES))
    serial = lint_files(items, jobs=1)
    parallel = lint_files(items, jobs=2)
    assert [r.path for r in parallel] == [p for p, _ in items]
    assert [len(r.findings) for r in parallel] == [len(r.findings) for r in serial]
    assert sum(len(r.findings) for r in parallel) == 20


def test_jobs_is_bounded_by_the_usable_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `check -j 1000` must not start 1000 processes: with one usable CPU no pool is started.
    import concurrent.futures

    import maskcheck.lint.runner as runner

    files = []
    for i in range(120):
        f = tmp_path / f"m{i}.py"
        f.write_text("import torch\nm = torch.triu(torch.full((4, 4), float('-inf')))\n")
        files.append((str(f), frozenset({"MC503"})))

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process pool was started")

    monkeypatch.setattr(runner, "usable_cpus", lambda: 1)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    reports = runner.lint_files(files, jobs=1000)
    assert [r.path for r in reports] == [p for p, _ in files]
    assert all([f.code for f in r.findings] == ["MC503"] for r in reports)


def test_message_of_a_mask_spanning_lines_is_one_line(tmp_path: Path) -> None:
    # The message quotes the mask; a parenthesised mask over three lines is quoted unparsed.
    path = tmp_path / "a.py"
    path.write_text(
        "import torch.nn.functional as F\n\n\n"
        "def attend(q, k, v, ids):\n"
        "    keep = ids != 0\n"
        "    return F.scaled_dot_product_attention(\n"
        "        q, k, v,\n"
        "        attn_mask=(\n"
        "            ~keep\n"
        "        )[:, None, None, :],\n"
        "    )\n")
    report = lint_file(str(path), frozenset({"MC511"}))
    assert [(f.line, f.code) for f in report.findings] == [(8, "MC511")]
    message = report.findings[0].message
    assert "\n" not in message
    assert message.startswith("(~keep)[:, None, None, :] is True at padding")


def test_python_312_syntax_is_named_when_this_python_cannot_read_it(tmp_path: Path) -> None:
    # orb-models' `class AbstractAtomsAdapter[T: AbstractAtomBatch](ABC):` (PEP 695)
    path = tmp_path / "adapter.py"
    path.write_text("from abc import ABC\n\n\nclass Adapter[T: int](ABC):\n    pass\n")
    error = lint_file(str(path), ALL_CODES).error
    if sys.version_info >= (3, 12):
        assert error is None
    else:
        assert error is not None and error.startswith("syntax error at line 4")
        assert error.endswith(f"this is Python 3.{sys.version_info.minor}: run maskcheck with a "
                              "newer Python to check this file)")
    path.write_text("def f(:\n")  # an error of any Python gets no such note
    assert "3.12" not in (lint_file(str(path), ALL_CODES).error or "")
