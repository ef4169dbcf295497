"""Property tests: whatever a notebook holds, linting it gives findings or one error line,
and neutralising IPython syntax never changes a cell's line count (locations stay true)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maskcheck.lint.notebook import python_lines
from maskcheck.lint.runner import lint_file

ALL = frozenset({"MC501", "MC502", "MC503", "MC504", "MC505", "MC506"})
SETTINGS = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

LINES = st.sampled_from([
    "s = scores.masked_fill(mask, -1e9)", "%time x = 1", "!pip install torch", "files = !ls",
    "torch.triu?", "%%time", "%%bash", "def f(x):", "    return x", "    %time y", "(", ")",
    "msg = ('%s'", "       % 1)", "x = 1  # noqa", "", "   ", "\\", "'''", "m = torch.triu(m)",
    'm = torch.full((n, n), float("-inf"))', "é = 1", "\t!ls",
])
CELL_TEXT = st.lists(LINES, max_size=8).map("\n".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=10,
)
CELL = st.fixed_dictionaries(
    {"cell_type": st.sampled_from(["code", "markdown", "raw", 3]),
     "source": CELL_TEXT | st.lists(CELL_TEXT, max_size=3) | JSON},
)
NOTEBOOK = st.fixed_dictionaries(
    {"cells": st.lists(CELL, max_size=5) | JSON,
     "metadata": st.sampled_from([{}, {"kernelspec": {"language": "python"}},
                                  {"language_info": {"name": "R"}}, [], None])},
) | JSON


@SETTINGS
@given(text=CELL_TEXT)
def test_neutralising_keeps_the_line_count(text: str) -> None:
    assert len(python_lines(text)) == len(text.split("\n"))


@SETTINGS
@given(doc=NOTEBOOK)
def test_any_json_is_findings_or_one_error_line(tmp_path: Path, doc: object) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(doc))
    report = lint_file(str(path), ALL)  # raises nothing
    if report.error is not None:
        assert "\n" not in report.error and report.findings == []
    for f in report.findings:
        assert f.cell is not None and f.line is not None and f.line >= 1


@SETTINGS
@given(data=st.binary(max_size=200))
def test_any_bytes_are_findings_or_one_error_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_bytes(data)
    report = lint_file(str(path), ALL)
    assert report.error is None or "\n" not in report.error
