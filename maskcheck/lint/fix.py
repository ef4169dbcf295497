"""`check --fix` / `--diff`: apply the safe fixes of source rules, or show them as a diff."""

from __future__ import annotations

import difflib
import io
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass

from maskcheck.errors import FileProblem
from maskcheck.lint.reading import read_regular, source_kind, source_limit
from maskcheck.lint.runner import find_hits, fixed_source
from maskcheck.rules.registry import get_rule

_BOM = "\ufeff"


@dataclass(frozen=True)
class FileFix:
    path: str
    before: str
    after: str
    fixed: int = 0  # findings with a safe fix that the edit removes

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=self.path, tofile=self.path))


def _decoded(data: bytes) -> tuple[str, str] | None:
    """The text of a source file and the encoding to write it back in (None: not text)."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:  # a `# -*- coding: latin-1 -*-` file is written back in its own encoding
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding), encoding
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return None


def _fixable(source: str, enabled: frozenset[str], path: str) -> int:
    safe = frozenset(c for c in enabled if (rule := get_rule(c)) is not None and rule.safe_fix)
    try:
        return sum(1 for hit in find_hits(source, safe, path=path) if hit.edit is not None)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0


def fix_files(items: Sequence[tuple[str, frozenset[str]]], *, write: bool) -> list[FileFix]:
    """The files that safe fixes change; written back when `write`. Python sources of any
    name (`.py`, `.pyi`, a script without a suffix), in their own encoding; notebooks are not
    edited (see `check`).

    A file with no fixable finding is never opened for writing. Unreadable files are left to
    the report that follows.
    """
    out: list[FileFix] = []
    for path, enabled in items:
        try:  # the one reading discipline of check: regular files only, bounded
            data = read_regular(path, limit=source_limit(path), what=source_kind(path))
        except FileProblem:
            continue
        decoded = _decoded(data)
        if decoded is None:
            continue
        text, encoding = decoded
        bom = text.startswith(_BOM)
        source = text[1:] if bom else text
        try:
            after = fixed_source(source, enabled, path=path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if after == source:
            continue
        try:
            encoded = ((_BOM if bom else "") + after).encode(encoding)
        except UnicodeEncodeError:
            continue  # an edit the file's encoding cannot hold: left as it is
        out.append(FileFix(path, source, after, _fixable(source, enabled, path)
                           - _fixable(after, enabled, path)))
        if write:
            with open(path, "wb") as f:
                f.write(encoded)
    return out
