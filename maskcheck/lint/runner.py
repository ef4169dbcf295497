"""Read, parse and lint source files; spread many files over processes."""

from __future__ import annotations

import ast
import gc
import io
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from maskcheck.errors import FileProblem
from maskcheck.lint.checks import Edit, Hit, lint_tree
from maskcheck.lint.noqa import is_suppressed, suppressions
from maskcheck.lint.project import may_run_float16, mentions_float16
from maskcheck.lint.reading import is_notebook, read_regular, source_kind, source_limit
from maskcheck.model import FileReport, Finding
from maskcheck.rules.registry import get_rule
from maskcheck.system import usable_cpus

# Below this many files one process is faster than starting workers.
PARALLEL_MIN_FILES = 48
BATCHES_PER_WORKER = 16
# The parser needs about 500 bytes of memory per source byte on a dense statement (a 4 MB list
# literal took 2 GB): past this size a file is reported, not parsed.
MAX_SOURCE_CHARS = 8 * 1024 * 1024


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


def parse_module(source: str, path: str) -> ast.Module:
    """The whole file's tree; ValueError with a one-line reason for a parser bomb."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ValueError(f"too large to lint ({len(source) // (1024 * 1024)} MiB; the limit "
                         f"is {MAX_SOURCE_CHARS // (1024 * 1024)} MiB)")
    try:
        return ast.parse(source, filename=path)
    except (RecursionError, MemoryError):
        raise ValueError("could not parse: nested too deeply") from None


def find_hits(source: str, enabled: frozenset[str], *, path: str = "<source>") -> list[Hit]:
    """Unsuppressed rule hits of one whole-file parse and walk."""
    source = normalize_newlines(source)
    tree = parse_module(source, path)
    try:
        hits = lint_tree(tree, enabled, source, path)
    except (RecursionError, MemoryError):
        raise ValueError("could not lint: expression nested too deeply") from None
    if not hits:
        return []
    table = suppressions(source)
    return [h for h in hits if not is_suppressed(table, h.code, h.line, h.end_line)]


def normalize_newlines(source: str) -> str:
    """CR-only and CRLF files read like LF ones (same lines, same findings)."""
    if "\r" not in source:
        return source
    return source.replace("\r\n", "\n").replace("\r", "\n")


def lint_source(source: str, enabled: frozenset[str], *, path: str = "<source>") -> list[Finding]:
    """Findings of the enabled source rules; SyntaxError and ValueError (bombs) propagate."""
    hits = find_hits(source, enabled, path=path)
    if not hits:
        return []
    lines = normalize_newlines(source).split("\n")
    out: list[Finding] = []
    for hit in hits:
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

            report.findings = _float16_gate(
                lint_notebook(data, enabled, path=path, lint=lint_source), data, path)
            return report
        source = decode_source(data)
        report.findings = _float16_gate(lint_source(source, enabled, path=path), data, path)
    except ValueError as e:  # undecodable, NUL bytes, a malformed notebook
        report.error = str(e)
    except SyntaxError as e:
        where = f" at line {e.lineno}" + (f", column {e.offset}" if e.offset else "")
        report.error = f"syntax error{where}: {e.msg}{_newer_syntax(e.text)}"
        report.error_line, report.error_col = e.lineno, e.offset or None
    except (RecursionError, MemoryError):
        report.error = "could not parse: nested too deeply"
    except Exception as e:  # a linter bug costs this file an error line, not the whole run
        report.error = f"internal error while linting ({type(e).__name__}: {e}); please report it"
    return report


# PEP 695's type parameters and `type` statements (Python 3.12): `class Adapter[T: Batch](ABC):`.
_PEP695 = re.compile(r"^\s*(?:(?:async\s+)?def|class)\s+\w+\s*\[|^\s*type\s+\w+\s*(?:\[|=)")


def _newer_syntax(text: str | None) -> str:
    """A note for a syntax error on a line of Python 3.12 syntax read by an older Python: the
    file may be fine, and a newer Python (running maskcheck) reads it."""
    if sys.version_info >= (3, 12) or text is None or not _PEP695.match(text):
        return ""
    return (f" (Python 3.12 syntax; this is Python {sys.version_info.major}."
            f"{sys.version_info.minor}: run maskcheck with a newer Python to check this file)")


def _float16_gate(findings: list[Finding], data: bytes, path: str) -> list[Finding]:
    """Without MC501 where neither the file nor its project ever mentions float16: the fill
    then runs in float32 or bfloat16, where it is finite (see `maskcheck.lint.project`).
    `lint_source` has no project, so it keeps them."""
    if not any(f.code == "MC501" for f in findings) or mentions_float16(
            data) or may_run_float16(path):
        return findings
    return [f for f in findings if f.code != "MC501"]


# A parse allocates hundreds of thousands of nodes, none in a reference cycle, and each tree is
# freed by reference counting when its file is done; at the default threshold (700) the
# collector runs thousands of times per file for nothing (measured: 5-15% of the lint time on
# transformers' models/). It still runs, only less often.
_GC_THRESHOLD = (50_000, 20, 20)


@contextmanager
def _fewer_collections() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(*_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _lint_batch(batch: Sequence[tuple[str, frozenset[str]]]) -> list[FileReport]:
    with _fewer_collections():
        return [lint_file(path, enabled) for path, enabled in batch]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return 0  # read (and reported) by its worker


def lint_files(
    items: Sequence[tuple[str, frozenset[str]]], *, jobs: int | None = None
) -> list[FileReport]:
    """Lint (path, enabled codes) pairs; results come back in the same order."""
    # --jobs is bounded by the CPUs this process may use: more workers only cost memory.
    workers = min(jobs or usable_cpus(), usable_cpus(),
                  max(1, len(items) // (PARALLEL_MIN_FILES // 2)))
    if workers <= 1 or len(items) < PARALLEL_MIN_FILES:
        return _lint_batch(items)
    # Files largest first, dealt round-robin into many batches: each batch holds about the
    # same share of the bytes, and the pool hands out the last ones to whichever worker is
    # free, so no worker is left with a long batch at the end (interleaving the files in the
    # order found gave one worker 52% of transformers' models/); no per-file round trips.
    count = workers * BATCHES_PER_WORKER
    by_size = sorted(items, key=lambda item: _size(item[0]), reverse=True)
    batches = [by_size[i::count] for i in range(count)]
    from concurrent.futures import ProcessPoolExecutor

    # Objects alive now (the CLI's modules) are never garbage: the workers' collector skips them.
    gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_lint_batch, batches))
    finally:
        gc.unfreeze()
    by_path: dict[str, FileReport] = {r.path: r for batch in done for r in batch}
    return [by_path[path] for path, _ in items]


def source_lines(source: str) -> list[str]:
    """The lines of a source with their endings, split where the parser splits them: at
    `\n`, `\r\n` and `\r` only (`str.splitlines` also splits at a form feed, U+2028 and
    other characters Python allows inside a line)."""
    return io.StringIO(source, newline="").readlines()


def fixed_source(source: str, enabled: frozenset[str], *, path: str = "<source>") -> str:
    """The source with every safe fix of an unsuppressed finding applied (same text if none).

    Edits are made on the original lines, so line endings, encoding and everything else in
    the file stay as they were; an edit that spans lines or overlaps another is left out, and
    so is a line's edits that would leave the file unparsable (the other lines' are kept).
    """
    safe = frozenset(c for c in enabled if (rule := get_rule(c)) is not None and rule.safe_fix)
    if not safe:
        return source
    edits = [h.edit for h in find_hits(source, safe, path=path) if h.edit is not None]
    edits = [e for e in edits if e.line == e.end_line]
    if not edits:
        return source
    original = source_lines(source)
    by_line: dict[int, list[Edit]] = {}
    for edit in edits:
        if edit.line <= len(original):
            by_line.setdefault(edit.line, []).append(edit)
    changed = {number: _edited_line(original[number - 1], line_edits)
               for number, line_edits in sorted(by_line.items())}
    lines = list(original)
    for number, text in changed.items():
        lines[number - 1] = text
    if _parses("".join(lines), path):
        return "".join(lines)
    # Some line's edits met an unusual layout (a trailing comma on its own line...): keep
    # each line's edits only if the file still parses with them and the ones kept before.
    lines = list(original)
    for number, text in changed.items():
        lines[number - 1] = text
        if not _parses("".join(lines), path):
            lines[number - 1] = original[number - 1]
    return "".join(lines)


def _edited_line(raw: str, line_edits: list[Edit]) -> str:
    body = raw.rstrip("\r\n")
    data = body.encode("utf-8")
    last_start = len(data) + 1
    for edit in sorted(line_edits, key=lambda e: e.col, reverse=True):
        if edit.end_col > last_start or edit.end_col > len(data):
            continue  # overlaps the edit to its right
        data = data[:edit.col] + edit.text.encode("utf-8") + data[edit.end_col:]
        last_start = edit.col
    return data.decode("utf-8") + raw[len(body):]


def _parses(source: str, path: str) -> bool:
    try:
        ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
