"""Read, pre-filter, parse and lint source files; spread many files over processes."""

from __future__ import annotations

import ast
import itertools
import os
import re
from collections.abc import Sequence

from maskcheck.errors import FileProblem
from maskcheck.lint.checks import FLOAT_STRING, LARGE_LITERAL, hot_lines, lint_tree
from maskcheck.lint.noqa import is_suppressed, suppressions
from maskcheck.lint.reading import is_notebook, read_regular, source_kind, source_limit
from maskcheck.model import FileReport, Finding
from maskcheck.rules.registry import get_rule

# A file is parsed only when the text of one enabled rule's trigger appears in it.
# Each pattern starts with a literal so that `re` can skip ahead quickly: `-1e9`, `- 1e9 * m`,
# `-1000000`, `-10**9`, `float("-1e9")`.
_LARGE_LITERAL = LARGE_LITERAL
_FLOAT_STRING = FLOAT_STRING
_EQ_ZERO = re.compile(r"(?:\[|masked_fill_?\()\s*\w+\s*==\s*0(?:\.0*)?\s*[\],]")
_SELF_FILL = re.compile(r"self\.\w+\.masked_fill_\(")
# Below this many files one process is faster than starting workers.
PARALLEL_MIN_FILES = 48


def _may_match(text: str, code: str) -> bool:
    if code == "MC501":
        return (_LARGE_LITERAL.search(text) is not None
                or _FLOAT_STRING.search(text) is not None)
    if code == "MC502":
        return "key_padding_mask" in text
    if code == "MC503":
        return "triu" in text
    if code == "MC504":
        return ("zeros" in text and ("== 0" in text or "==0" in text)
                and _EQ_ZERO.search(text) is not None)
    if code == "MC505":
        return "masked_fill_" in text and (
            "requires_grad" in text or _SELF_FILL.search(text) is not None)
    if code == "MC506":
        return "is_causal" in text and "scaled_dot_product_attention" in text
    return False


def worth_parsing(text: str, enabled: frozenset[str]) -> bool:
    return any(_may_match(text, code) for code in enabled)


def decode_source(data: bytes) -> str:
    """The text of a Python file; ValueError with a one-line reason when it is not text."""
    if b"\0" in data:
        raise ValueError("binary file, not Python source (contains NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        first_error = e
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    if encoding.replace("_", "-").lower() not in {"utf-8", "utf-8-sig"}:
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            pass
    raise ValueError(f"not UTF-8 text (byte 0x{data[first_error.start]:02x} at offset "
                     f"{first_error.start})")


# A line that starts a top-level statement: not indented, not a comment, not a closing bracket
# and not a clause continuing the statement above.
_TOP_LEVEL = re.compile(r"^(?![ \t#)\]}\r\n]|(?:else|elif|except|finally)\b)", re.M)


def top_level_chunks(source: str) -> list[int]:
    """First line (1-based) of each run of top-level statements, decorators glued to defs."""
    starts: list[int] = []
    decorated = False
    line_no = 1
    last = 0
    for m in _TOP_LEVEL.finditer(source):
        line_no += source.count("\n", last, m.start())
        last = m.start()
        if not decorated:
            starts.append(line_no)
        decorated = source.startswith("@", m.start())
    return starts


def parse_hot_parts(source: str, hot: set[int], path: str) -> ast.Module:
    """Parse only the top-level statements that hold a trigger line; the rest cannot match.

    Chunks are found by indentation; when one does not parse on its own (a top-level-looking
    line inside a string), the whole file is parsed instead, so real syntax errors surface.
    """
    starts = top_level_chunks(source)
    lines = source.splitlines(keepends=True)
    if not hot or len(starts) < 8:
        return ast.parse(source, filename=path)
    bounds = [*starts, len(lines) + 1]
    ranges: list[list[int]] = []
    for first, stop in itertools.pairwise(bounds):
        if any(first <= line < stop for line in hot):
            if ranges and ranges[-1][1] == first:
                ranges[-1][1] = stop
            else:
                ranges.append([first, stop])
    body: list[ast.stmt] = []
    try:
        for first, stop in ranges:
            chunk = "\n" * (first - 1) + "".join(lines[first - 1:stop - 1])
            body.extend(ast.parse(chunk, filename=path).body)
    except SyntaxError:
        return ast.parse(source, filename=path)
    return ast.Module(body=body, type_ignores=[])


def lint_source(source: str, enabled: frozenset[str], *, path: str = "<source>") -> list[Finding]:
    """Findings of the enabled source rules; SyntaxError propagates."""
    if not worth_parsing(source, enabled):
        return []
    hot = hot_lines(source, enabled)
    tree = parse_hot_parts(source, hot, path)
    hits = lint_tree(tree, enabled, source, hot)
    if not hits:
        return []
    table = suppressions(source)
    lines = source.splitlines()
    out: list[Finding] = []
    for hit in hits:
        if is_suppressed(table, hit.code, hit.line, hit.end_line):
            continue
        rule = get_rule(hit.code)
        if rule is None:  # pragma: no cover - every code the linter emits is registered
            continue
        out.append(Finding(
            code=rule.code, name=rule.name, severity=rule.severity, message=hit.message,
            fix=rule.fix or None, line=hit.line, col=_char_col(lines, hit.line, hit.col),
        ))
    return out


def _char_col(lines: list[str], line: int, byte_col: int) -> int:
    """1-based character column from ast's 0-based UTF-8 byte offset."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return byte_col + 1
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace")) + 1


def lint_file(path: str, enabled: frozenset[str]) -> FileReport:
    report = FileReport(path=path)
    try:
        data = read_regular(path, limit=source_limit(path), what=source_kind(path))
    except FileProblem as e:
        report.error = e.problem
        return report
    try:
        if is_notebook(path):
            from maskcheck.lint.notebook import lint_notebook

            report.findings = lint_notebook(data, enabled, path=path, lint=lint_source)
            return report
        source = decode_source(data)
        report.findings = lint_source(source, enabled, path=path)
    except ValueError as e:  # undecodable, NUL bytes, a malformed notebook
        report.error = str(e)
    except SyntaxError as e:
        where = f" at line {e.lineno}" + (f", column {e.offset}" if e.offset else "")
        report.error = f"syntax error{where}: {e.msg}"
    except (RecursionError, MemoryError):
        report.error = "could not parse: nested too deeply"
    return report


def _lint_batch(batch: Sequence[tuple[str, frozenset[str]]]) -> list[FileReport]:
    return [lint_file(path, enabled) for path, enabled in batch]


def lint_files(
    items: Sequence[tuple[str, frozenset[str]]], *, jobs: int | None = None
) -> list[FileReport]:
    """Lint (path, enabled codes) pairs; results come back in the same order."""
    workers = min(jobs or os.cpu_count() or 1, max(1, len(items) // (PARALLEL_MIN_FILES // 2)))
    if workers <= 1 or len(items) < PARALLEL_MIN_FILES:
        return _lint_batch(items)
    # Interleaved batches balance big and small files without per-file round trips.
    batches = [items[i::workers * 4] for i in range(workers * 4)]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(_lint_batch, batches))
    by_path: dict[str, FileReport] = {r.path: r for batch in done for r in batch}
    return [by_path[path] for path, _ in items]
