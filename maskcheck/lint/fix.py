"""`check --fix` / `--diff`: apply the safe fixes of source rules, or show them as a diff."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from maskcheck.errors import FileProblem
from maskcheck.lint.reading import read_regular, source_kind, source_limit
from maskcheck.lint.runner import fixed_source

_BOM = "\ufeff"


@dataclass(frozen=True)
class FileFix:
    path: str
    before: str
    after: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=self.path, tofile=self.path))


def fix_files(items: Sequence[tuple[str, frozenset[str]]], *, write: bool) -> list[FileFix]:
    """The files that safe fixes change; written back when `write` (UTF-8 `.py` files only).

    A file with no fixable finding is never opened for writing. Unreadable files are left to
    the report that follows.
    """
    out: list[FileFix] = []
    for path, enabled in items:
        if not path.endswith(".py"):
            continue
        try:  # the one reading discipline of check: regular files only, bounded
            data = read_regular(path, limit=source_limit(path), what=source_kind(path))
            text = data.decode("utf-8")
        except (FileProblem, UnicodeDecodeError):
            continue
        bom = text.startswith(_BOM)
        source = text[1:] if bom else text
        try:
            after = fixed_source(source, enabled, path=path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if after == source:
            continue
        out.append(FileFix(path, source, after))
        if write:
            with open(path, "wb") as f:
                f.write(((_BOM if bom else "") + after).encode("utf-8"))
    return out
