"""Jupyter notebooks (`.ipynb`): code cells joined into one module, findings mapped back.

The code cells of an nbformat-4 notebook are joined, in order, into one module (a name set in
one cell is seen in the next, as when the notebook runs top to bottom); every line of the
module knows its cell and its line in that cell. Cells are numbered 1-based over *all* cells,
markdown and raw included, so `cell N` is the N-th cell a reader counts down the notebook and
`cells[N-1]` in the JSON. IPython syntax that is not Python (line magics `%time x`, shell lines
`!pip install`, `x = !ls`, help `obj?`, and cells that start with a non-Python cell magic such
as `%%bash`) is neutralised line for line, never parsed as code; cells under Python cell magics
(`%%time`, `%%timeit`, `%%capture`, `%%prun`, `%%debug`) are linted below the magic line.
Suppression comments inside cells apply to their own line as in a `.py` file.
Standard library only: this runs in the pre-commit hook.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from maskcheck.model import Finding

# Cell magics whose body is Python run by IPython.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
_CELL_MAGIC = re.compile(r"\s*%%(\w+)")
# A statement that is IPython, not Python: `%magic`, `!shell`, `x = !ls`, `x = %who_ls`,
# `?obj`, `obj?`, `obj??`.
_MAGIC_LINE = re.compile(
    r"^(?P<indent>[ \t]*)(?:[%!?]|[\w.\[\], \t]+=[ \t]*[%!](?!=)|[\w.]+\?{1,2}[ \t]*$)"
)

LintSource = Callable[..., list[Finding]]


@dataclass(frozen=True)
class NotebookSource:
    """The joined module and, per line of it (0-based), its (cell, line in cell), 1-based."""

    source: str
    where: list[tuple[int, int]]

    def locate(self, line: int) -> tuple[int, int]:
        if 1 <= line <= len(self.where):
            return self.where[line - 1]
        return (self.where[-1][0], self.where[-1][1] + 1) if self.where else (1, line)

    def locate_in_cell(self, line: int) -> tuple[int, int]:
        """`locate`, but never line 0 (the marker line before a cell, which the parser can
        reach from a backslash at the end of the cell before): that cell's last line then."""
        cell, in_cell = self.locate(line)
        while in_cell == 0 and line > 1:
            line -= 1
            cell, in_cell = self.locate(line)
        return (cell, in_cell) if in_cell else (cell, 1)


def cell_text(cell: dict[str, Any], number: int) -> str:
    """A cell's source as one text; ValueError when it is not text."""
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    if isinstance(source, str):
        return source
    raise ValueError(f"not a valid notebook: cell {number}'s source is not text")


def _parses(text: str) -> bool:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        compile(text, "<cell>", "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def python_lines(text: str) -> list[str]:
    """The lines of one code cell with IPython-only syntax replaced by `pass` (same count)."""
    # CRLF and CR-only cells split like LF ones, so cell lines match the linter's lines
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    first = next((ln for ln in lines if ln.strip()), "")
    magic = _CELL_MAGIC.match(first)
    if magic is not None:
        head = lines.index(first)
        if magic.group(1) not in PYTHON_CELL_MAGICS:
            return [""] * len(lines)  # %%bash, %%html, %%writefile...: not Python at all
        lines = [*[""] * (head + 1), *lines[head + 1:]]
    if not any(_MAGIC_LINE.match(line) for line in lines):
        return lines
    if _parses("\n".join(lines)):
        return lines  # plain Python: a `%` or `!=` continuation line stays as it is
    out: list[str] = []
    continued = False
    for line in lines:
        m = _MAGIC_LINE.match(line)
        if continued or m is not None:
            indent = m.group("indent") if m is not None else ""
            out.append(f"{indent}pass" if not continued else "")
            continued = line.rstrip().endswith("\\")
        else:
            out.append(line)
    return out


def notebook_source(data: bytes) -> NotebookSource | None:
    """The Python of a notebook; None when its kernel is not Python. ValueError when the
    file is not an nbformat-4 notebook (one-line reason)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"not a valid notebook: not UTF-8 (byte 0x{data[e.start]:02x} at "
                         f"offset {e.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a valid notebook: not JSON ({e.msg} at line {e.lineno}, "
                         f"column {e.colno})") from None
    except ValueError as e:  # e.g. an integer literal over Python's 4300-digit limit
        raise ValueError(f"not a valid notebook: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a valid notebook: the JSON is not an object")
    if "worksheets" in doc and "cells" not in doc:
        raise ValueError("nbformat 3 notebook: not supported (upgrade it with "
                         "`jupyter nbconvert --to notebook --inplace`)")
    cells = doc.get("cells")
    if not isinstance(cells, list):
        raise ValueError("not a valid notebook: no `cells` list")
    if not _is_python(doc.get("metadata")):
        return None
    lines: list[str] = []
    where: list[tuple[int, int]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise ValueError(f"not a valid notebook: cell {number} is not an object")
        if cell.get("cell_type") != "code":
            continue
        # A cell marker between cells: the linter reads a cell's last expression as shown
        # (MC525), as in a `# %%` file. Never a finding's line.
        lines.append("# %%")
        where.append((number, 0))
        for in_cell, line in enumerate(python_lines(cell_text(cell, number)), start=1):
            lines.append(line)
            where.append((number, in_cell))
    return NotebookSource("\n".join(lines) + "\n", where)


def _is_python(metadata: object) -> bool:
    """False only when the notebook says its language is something else (R, Julia...)."""
    if not isinstance(metadata, dict):
        return True
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field), str):
            return bool(table[field].strip().lower() in ("python", "python3", "ipython"))
    return True


_LINE_REFERENCE = re.compile(r"\bline (\d+)\b")


def cell_relative(message: str, nb: NotebookSource, cell: int) -> str:
    """A SyntaxError message with its `line N` references (`after function definition on line
    6`, `(detected at line 5)`) turned from lines of the joined module into lines of a cell:
    `line 2` in the cell of the error, `line 2 of cell 1` in another one."""

    def relative(match: re.Match[str]) -> str:
        ref_cell, ref_line = nb.locate_in_cell(int(match.group(1)))
        return f"line {ref_line}" + ("" if ref_cell == cell else f" of cell {ref_cell}")

    return _LINE_REFERENCE.sub(relative, message)


def lint_notebook(data: bytes, enabled: frozenset[str], *, path: str,
                  lint: LintSource) -> list[Finding]:
    """Findings of `lint(source, enabled, path=...)` on the notebook's code, each carrying
    its cell and its line in that cell. ValueError (one line) for a malformed notebook or a
    syntax error, located by cell."""
    nb = notebook_source(data)
    if nb is None:
        return []
    try:
        findings = lint(nb.source, enabled, path=path)
    except SyntaxError as e:
        cell, line = nb.locate_in_cell(e.lineno or 1)
        on_marker = nb.locate(e.lineno or 1)[1] == 0  # its column is not one of the cell's
        column = f", column {e.offset}" if e.offset and not on_marker else ""
        message = cell_relative(e.msg, nb, cell)
        raise ValueError(f"syntax error in cell {cell} at line {line}{column}: {message}") from None
    out: list[Finding] = []
    for f in findings:
        if f.line is None:
            out.append(f)
            continue
        cell, line = nb.locate(f.line)
        out.append(dataclasses.replace(f, cell=cell, line=line))
    return out
