"""Shared fixtures of the lint tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from maskcheck.lint.runner import lint_file
from maskcheck.rules.registry import all_rules

# Every source rule, read from the registry so a new rule is linted by every test.
SOURCE_CODES = frozenset(r.code for r in all_rules() if r.code.startswith("MC5"))

Found = Callable[[str], list[tuple[int, str]]]


@pytest.fixture
def found(tmp_path: Path) -> Found:
    """Lint a source (written to a real file) with every source rule: [(line, code)]."""
    def lint(source: str, name: str = "a.py") -> list[tuple[int, str]]:
        path = tmp_path / name
        path.write_text(source)
        report = lint_file(str(path), SOURCE_CODES)
        assert report.error is None, report.error
        return [(f.line, f.code) for f in report.findings]
    return lint


def line_of(source: str, text: str) -> int:
    """The line number of the one line of `source` holding `text`."""
    lines = [i for i, line in enumerate(source.splitlines(), 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]
