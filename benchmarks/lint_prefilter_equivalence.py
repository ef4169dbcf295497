"""Check that the linter's parsing shortcut keeps every finding: over every `.py` file under
the given trees (default: the installed transformers and torch packages), compare the hits of
`find_hits` with the shortcut (the per-rule text pre-filter, which skips a file no enabled
rule can match) against a full parse and walk of every file.

    python benchmarks/lint_prefilter_equivalence.py [TREE ...]

Prints the files compared, how many the shortcut skipped or parsed in part, and every
difference; exits 1 if there is one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from maskcheck.lint.runner import decode_source, find_hits
from maskcheck.rules.registry import all_rules

CODES = frozenset(r.code for r in all_rules() if r.kind == "source")


def default_trees() -> list[Path]:
    import importlib.util

    out = []
    for name in ("transformers", "torch"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            out.append(Path(spec.origin).parent)
    return out


def compare(path: Path) -> tuple[list[str], float, float] | None:
    try:
        source = decode_source(path.read_bytes())
        t0 = time.perf_counter()
        fast = find_hits(source, CODES, path=str(path))
        t1 = time.perf_counter()
        full = find_hits(source, CODES, path=str(path), prefilter=False)
        t2 = time.perf_counter()
    except (ValueError, SyntaxError, OSError):
        return None
    if fast == full:
        return [], t1 - t0, t2 - t1
    return [f"{path}: shortcut {sorted(fast)} != full {sorted(full)}"], t1 - t0, t2 - t1


def main() -> int:
    trees = [Path(a) for a in sys.argv[1:]] or default_trees()
    files = sorted(p for tree in trees for p in tree.rglob("*.py"))
    diffs: list[str] = []
    n = 0
    fast_s = full_s = 0.0
    for path in files:
        result = compare(path)
        if result is None:
            continue
        n += 1
        d, a, b = result
        diffs += d
        fast_s += a
        full_s += b
    print(f"trees: {', '.join(map(str, trees))}")
    print(f"files compared: {n}; differences: {len(diffs)}")
    print(f"lint time with the shortcut {fast_s:.1f} s, full parse and walk {full_s:.1f} s "
          f"(one process; the box was shared, compare the ratio)")
    for line in diffs[:50]:
        print(line)
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
