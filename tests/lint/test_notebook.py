"""Notebooks: code cells linted as one module, IPython syntax neutralised, cell locations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from maskcheck.lint.notebook import notebook_source, python_lines
from maskcheck.lint.runner import lint_file

ROOT = Path(__file__).resolve().parents[2]
ALL = frozenset({"MC501", "MC502", "MC503", "MC504", "MC505", "MC506"})
FILL = "s = scores.masked_fill(mask, -1e9)"


def code(source: str | list[str]) -> dict[str, Any]:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": source}


def markdown(text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def notebook(*cells: dict[str, Any], language: str = "python") -> bytes:
    doc = {"cells": list(cells), "nbformat": 4, "nbformat_minor": 5,
           "metadata": {"kernelspec": {"name": "k", "language": language,
                                       "display_name": "K"}}}
    return json.dumps(doc, indent=1).encode()


def lint_nb(tmp_path: Path, data: bytes) -> tuple[list[tuple[int | None, int | None, str]],
                                                  str | None]:
    path = tmp_path / "nb.ipynb"
    path.write_bytes(data)
    report = lint_file(str(path), ALL)
    return [(f.cell, f.line, f.code) for f in report.findings], report.error


def test_cells_are_numbered_over_all_cells_and_lines_within_the_cell(tmp_path: Path) -> None:
    data = notebook(markdown("# intro"), code(["import torch\n", FILL]), markdown("more"),
                    code(["x = 1\n", "\n", FILL]))
    found, error = lint_nb(tmp_path, data)
    assert error is None
    assert found == [(2, 2, "MC501"), (4, 3, "MC501")]


def test_cells_are_one_module_names_flow_between_them(tmp_path: Path) -> None:
    # MC503 needs to know what `m` holds: it is made in one cell, triu'd in the next
    data = notebook(code('m = torch.full((n, n), float("-inf"))'),
                    code("causal = torch.triu(m)"))
    found, _ = lint_nb(tmp_path, data)
    assert found == [(2, 1, "MC503")]


def test_ipython_syntax_is_neutralised_not_parsed(tmp_path: Path) -> None:
    cell = ["%matplotlib inline\n", "!pip install torch\n", "files = !ls\n", "torch.triu?\n",
            "?torch.triu\n", "def f(scores, mask):\n", "    %time y = 1\n",
            "    return scores.masked_fill(mask, -1e9)\n"]
    found, error = lint_nb(tmp_path, notebook(code(cell)))
    assert error is None
    assert found == [(1, 8, "MC501")]


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_crlf_and_cr_cells_keep_their_line_numbers(tmp_path: Path, newline: str) -> None:
    data = notebook(code(newline.join(["import torch", "x = 1", FILL])), code(FILL))
    found, _ = lint_nb(tmp_path, data)
    assert found == [(1, 3, "MC501"), (2, 1, "MC501")]


def test_plain_python_continuation_lines_are_left_alone() -> None:
    text = "msg = ('%s'\n       % name)\nok = (a\n      != b)"
    assert python_lines(text) == text.split("\n")


@pytest.mark.parametrize(("magic", "linted"), [
    ("%%time", True), ("%%timeit", True), ("%%capture out", True),
    ("%%bash", False), ("%%writefile x.py", False), ("%%html", False),
])
def test_cell_magics(tmp_path: Path, magic: str, linted: bool) -> None:
    found, error = lint_nb(tmp_path, notebook(code(f"{magic}\n{FILL}\nfor x in $(ls); do :; done"
                                                   if not linted else f"{magic}\n{FILL}")))
    assert error is None
    assert found == ([(1, 2, "MC501")] if linted else [])


@pytest.mark.parametrize("comment", ["# noqa: MC501", "# maskcheck: ignore[MC501]", "# noqa",
                                     "# maskcheck: ignore[large-negative-literal]"])
def test_suppression_comments_inside_cells(tmp_path: Path, comment: str) -> None:
    data = notebook(code(f"{FILL}  {comment}\n{FILL}"))
    found, _ = lint_nb(tmp_path, data)
    assert found == [(1, 2, "MC501")]


def test_a_syntax_error_is_located_by_cell(tmp_path: Path) -> None:
    _, error = lint_nb(tmp_path, notebook(markdown("m"), code(FILL), code("x = (1,\n" + FILL)))
    assert error is not None and error.startswith("syntax error in cell 3 at line ")


THREE_LINES = code(["x = 1\n", "y = 2\n", "z = 3"])


@pytest.mark.parametrize(("cells", "cell", "line", "message"), [
    # every line a message names is a line of a cell (the error's cell unless it says which);
    # columns and the exact line the parser stops at vary with the Python version
    ([THREE_LINES, code(["def f():\n", "\n", "# nothing"])], 2, "[1-3]",
     "expected an indented block after function definition on line 1"),
    ([THREE_LINES, code('s = "abc')], 2, "1", "unterminated string literal (detected at line 1)"),
    ([markdown("m"), THREE_LINES, code('s = """abc\n\nmore')], 3, "1",
     "unterminated triple-quoted string literal (detected at line 3)"),
    ([code("def f():"), code("x = 1")], 2, "1",
     "expected an indented block after function definition on line 1 of cell 1"),
    ([code("x = [1,\n"), code("2)")], 2, "1",
     "closing parenthesis ')' does not match opening parenthesis '[' on line 1 of cell 1"),
    # a backslash ending a cell runs into the next cell's marker line: the cell with the backslash
    ([code("x = 1 + \\"), code("y = 2")], 1, "1", "invalid syntax"),
])
def test_syntax_error_lines_are_lines_of_cells(tmp_path: Path, cells: list[dict[str, Any]],
                                               cell: int, line: str, message: str) -> None:
    import re

    (tmp_path / "nb.ipynb").write_bytes(notebook(*cells))
    r = _cli("nb.ipynb", cwd=tmp_path)
    assert r.returncode == 2
    first = r.stdout.splitlines()[0]
    pattern = (rf"nb\.ipynb: error: syntax error in cell {cell} at line {line}"
               rf"(, column \d+)?: {re.escape(message)}")
    assert re.fullmatch(pattern, first), first


def test_a_notebook_in_another_language_has_nothing_to_lint(tmp_path: Path) -> None:
    found, error = lint_nb(tmp_path, notebook(code(FILL), language="R"))
    assert found == [] and error is None


@pytest.mark.parametrize(("data", "problem"), [
    (b'{"cells": [', "not a valid notebook: not JSON (Expecting value at line 1, column 12)"),
    (b"[1, 2]", "not a valid notebook: the JSON is not an object"),
    (b'{"metadata": {}}', "not a valid notebook: no `cells` list"),
    (b'{"worksheets": [], "nbformat": 3}', "nbformat 3 notebook: not supported"),
    (b'{"cells": [{"cell_type": "code", "source": 5}]}',
     "not a valid notebook: cell 1's source is not text"),
    (b'{"cells": [7]}', "not a valid notebook: cell 1 is not an object"),
    (b'{"cells": "\xff"}', "not a valid notebook: not UTF-8 (byte 0xff at offset 11)"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"cells": [], "n": ' + b"9" * 5000 + b"}",
     "not a valid notebook: Exceeds the limit (4300 digits) for integer string conversion"),
])
def test_malformed_notebooks_are_one_line(tmp_path: Path, data: bytes, problem: str) -> None:
    found, error = lint_nb(tmp_path, data)
    assert found == [] and error is not None and problem in error and "\n" not in error


def test_bom_and_string_sources_are_accepted() -> None:
    nb = notebook_source(b"\xef\xbb\xbf" + notebook(code("a = 1\nb = 2")))
    # each code cell opens with a `# %%` marker line (line 0 of its cell)
    assert nb is not None and nb.source == "# %%\na = 1\nb = 2\n"
    assert nb.where == [(1, 0), (1, 1), (1, 2)]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "maskcheck", "check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=env)


def test_every_output_format_locates_the_cell(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nb.ipynb").write_bytes(notebook(markdown("# x"), code(["!ls\n", FILL])))
    concise = _cli("--fail-on", "warning", ".", cwd=tmp_path)  # found by the directory walk
    assert concise.returncode == 1
    assert concise.stdout.startswith("sub/nb.ipynb:cell 2:2:30: MC501 -1e9 in masked_fill")
    doc = json.loads(_cli("--format", "json", "sub/nb.ipynb", cwd=tmp_path).stdout)
    (finding,) = doc["files"][0]["findings"]
    assert (finding["cell"], finding["line"], finding["col"]) == (2, 2, 30)
    sarif = json.loads(_cli("--format", "sarif", "sub/nb.ipynb", cwd=tmp_path).stdout)
    (result,) = sarif["runs"][0]["results"]
    assert result["properties"] == {"cell": 2, "line": 2, "column": 30}
    assert result["message"]["text"].startswith("cell 2, line 2: -1e9")
    location = result["locations"][0]
    # GitHub code scanning needs region.startLine: the line and column within the cell
    assert location["physicalLocation"] == {"artifactLocation": {"uri": "sub/nb.ipynb"},
                                            "region": {"startLine": 2, "startColumn": 30}}
    assert location["logicalLocations"] == [{"name": "cell 2", "kind": "module"}]
    github = _cli("--format", "github", "sub/nb.ipynb", cwd=tmp_path).stdout
    assert github.startswith("::warning file=sub/nb.ipynb,title=maskcheck (MC501)::"
                             "sub/nb.ipynb:cell 2:2:30: MC501 ")


def test_a_malformed_notebook_is_exit_2_and_the_rest_is_checked(tmp_path: Path) -> None:
    (tmp_path / "bad.ipynb").write_text('{"cells": [')
    (tmp_path / "ok.py").write_text(FILL + "\n")
    r = _cli(".", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout.splitlines()[:2] == [
        "bad.ipynb: error: not a valid notebook: not JSON (Expecting value at line 1, column 12)",
        "ok.py:1:30: MC501 -1e9 in masked_fill overflows float16 (largest finite 65504): use "
        "torch.finfo(dtype).min or float('-inf')",
    ]


def test_a_notebook_is_checked_without_torch_numpy_or_typer(tmp_path: Path) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_bytes(notebook(code(FILL)))
    script = (
        "import sys\nfrom maskcheck.cli import main\n"
        f"rc = main(['check', '--fail-on', 'warning', {str(path)!r}])\n"
        "print('MODULES', rc, *(m in sys.modules for m in ('torch', 'numpy', 'typer')))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.splitlines()[-1] == "MODULES 1 False False False", r.stderr


def test_collect_keeps_notebooks_apart_from_python_sources(tmp_path: Path) -> None:
    # whatever rewrites Python files (--fix) iterates `sources`: a notebook is JSON
    from maskcheck.config import Config
    from maskcheck.lint.files import collect

    (tmp_path / "a.ipynb").write_bytes(notebook(code(FILL)))
    (tmp_path / "b.py").write_text(FILL + "\n")
    (tmp_path / "c.ipynb").write_bytes(notebook(code(FILL)))
    inputs = collect([tmp_path], Config())
    assert inputs.sources == [tmp_path / "b.py"]
    assert inputs.notebooks == [tmp_path / "a.ipynb", tmp_path / "c.ipynb"]
    assert [p.name for p in inputs.lintable()] == ["a.ipynb", "b.py", "c.ipynb"]
