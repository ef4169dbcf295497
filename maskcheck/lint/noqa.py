"""Inline suppressions: `# noqa`, `# noqa: MC501,MC503`, `# maskcheck: ignore[MC501]`.

Codes and rule names are both accepted (a name silences every code that carries it); a bare
`# noqa` or `# maskcheck: ignore` silences every rule on its line.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator, Mapping

from maskcheck.rules.registry import rules_for

ALL = frozenset({"*"})
_NOQA = re.compile(r"#\s*noqa(?::[ \t]*(?P<codes>[\w\-]+(?:[ \t]*,[ \t]*[\w\-]+)*))?", re.I)
_IGNORE = re.compile(r"#\s*maskcheck:\s*ignore(?:\[(?P<codes>[^\]]*)\]|(?![\w\[-]))", re.I)


def _codes(text: str) -> frozenset[str]:
    out: set[str] = set()
    for part in text.split(","):
        key = part.strip()
        if not key:
            continue
        rules = rules_for(key)
        if rules:
            out.update(r.code for r in rules)
        else:
            out.add(key.upper())
    return frozenset(out)


def _comments(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment, as the tokenizer sees them: a `# noqa` inside a string
    is not a comment, and lines are counted as the parser counts them (a form feed or U+2028
    does not start a line)."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
    except (tokenize.TokenError, SyntaxError):
        return  # the parser accepted the file, so this is not reached in practice


def suppressions(source: str) -> Mapping[int, frozenset[str]]:
    """Line number (1-based) -> codes silenced there (ALL for a bare noqa)."""
    lowered = source.lower()
    if "noqa" not in lowered and "maskcheck" not in lowered:
        return {}
    out: dict[int, frozenset[str]] = {}
    for number, comment in _comments(source):
        if out.get(number) is ALL:
            continue
        found: set[str] = set(out.get(number, ()))
        codes_of = [m.group("codes") for m in (*_NOQA.finditer(comment),
                                               *_IGNORE.finditer(comment))]
        if any(codes is None for codes in codes_of):  # bare (no codes): every rule on the line
            out[number] = ALL
            continue
        for codes in codes_of:
            found |= _codes(codes)
        if found:
            out[number] = frozenset(found)
    return out


def is_suppressed(
    table: Mapping[int, frozenset[str]], code: str, first_line: int, last_line: int
) -> bool:
    for line in {first_line, last_line}:
        codes = table.get(line)
        if codes is not None and (codes is ALL or code in codes):
            return True
    return False
