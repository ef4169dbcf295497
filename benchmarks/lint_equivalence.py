"""Same findings, two engines: `maskcheck check` of a baseline git ref against the working tree.

    python -P benchmarks/lint_equivalence.py [--base main] [--new REF] [TREE ...] [--refresh-base]

Each TREE (default: the installed transformers' `models/`, every code base under
benchmarks/_work/corpora, and benchmarks/lint_recall) is checked by both engines with
`python -P -m maskcheck.commands.check --output-format json --exit-zero TREE`, each run with
its own PYTHONPATH: the baseline is `git archive` of the ref's `maskcheck/` into
benchmarks/_work/equivalence/engines/<sha>/, the new engine is this checkout (or `--new REF`,
extracted the same way). Every difference is printed (file, line, col, code, message; error
lines; files only one engine read), and the script exits 1 on any.

The JSON of a ref's engine for a tree is kept in benchmarks/_work/equivalence/results/<sha>/,
keyed by the tree's path and a fingerprint of its files (path, size, mtime), so each ref is run
once per tree (a `--new` ref's results serve as a later baseline); `--refresh-base` runs the
baseline again. The working tree's results are never kept.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work"
CACHE = WORK / "equivalence"
SUFFIXES = (".py", ".pyi", ".ipynb")


def default_trees() -> list[Path]:
    trees: list[Path] = []
    spec = importlib.util.find_spec("transformers")
    if spec is not None and spec.origin is not None:
        trees.append(Path(spec.origin).parent / "models")
    corpora = WORK / "corpora"
    if corpora.is_dir():
        trees += sorted(p for p in corpora.iterdir() if p.is_dir())
    trees.append(ROOT / "benchmarks" / "lint_recall")
    return trees


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def base_engine(ref: str) -> tuple[str, Path]:
    """(sha, directory holding that commit's `maskcheck` package)."""
    sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    where = CACHE / "engines" / sha
    if not (where / "maskcheck" / "__init__.py").is_file():
        data = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "maskcheck"],
                              check=True, capture_output=True).stdout
        tmp = where.with_name(sha + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(where)
    return sha, where


def fingerprint(tree: Path) -> tuple[str, int]:
    """Hash of (relative path, size, mtime) of the files `check` could read, and their count."""
    h = hashlib.sha1()
    n = 0
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SUFFIXES):
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(p, tree)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
                n += 1
    return h.hexdigest()[:16], n


Result = dict[str, tuple[str | None, list[tuple[int, int, str, str]]]]


def run_engine(engine: Path, tree: Path) -> tuple[dict, float, float]:
    """The engine's JSON report of `tree`, wall seconds, CPU seconds of it and its workers."""
    env = dict(os.environ, PYTHONPATH=str(engine))
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "maskcheck.commands.check", "--output-format", "json",
         "--exit-zero", str(tree)],
        env=env, capture_output=True, text=True, cwd=str(tree),
    )
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                          - before.children_system)
    if proc.returncode not in (0, 2):
        raise SystemExit(f"{engine} on {tree}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout), wall, cpu


def findings(report: dict) -> Result:
    out: Result = {}
    for f in report["files"]:
        rows = sorted(
            (x.get("line", 0), x.get("col", 0), x["code"],
             json.dumps({k: v for k, v in x.items() if k not in ("line", "col", "code")},
                        sort_keys=True))
            for x in f["findings"]
        )
        out[f["path"]] = (f["error"], rows)
    return out


def cached_base(sha: str, engine: Path, tree: Path, refresh: bool) -> tuple[dict, float, float]:
    key, _ = fingerprint(tree)
    name = hashlib.sha1(str(tree.resolve()).encode()).hexdigest()[:10]
    path = CACHE / "results" / sha / f"{tree.name}-{name}-{key}.json.gz"
    if path.is_file() and not refresh:
        with gzip.open(path, "rt") as f:
            return json.load(f), 0.0, 0.0
    report, wall, cpu = run_engine(engine, tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with gzip.open(tmp, "wt") as f:
        json.dump(report, f)
    tmp.rename(path)
    return report, wall, cpu


def show(row: tuple[int, int, str, str]) -> str:
    line, col, code, rest = row
    return f"{line}:{col} {code} {json.loads(rest).get('message', '')}"


def compare(old: Result, new: Result) -> list[str]:
    out: list[str] = []
    for path in sorted(old.keys() | new.keys()):
        if path not in new:
            out.append(f"{path}: read by the baseline only")
            continue
        if path not in old:
            out.append(f"{path}: read by the new engine only")
            continue
        (old_err, old_rows), (new_err, new_rows) = old[path], new[path]
        if old_err != new_err:
            out.append(f"{path}: error {old_err!r} -> {new_err!r}")
        a, b = Counter(old_rows), Counter(new_rows)
        out += [f"{path}:{show(r)}  [baseline only]" for r in sorted((a - b).elements())]
        out += [f"{path}:{show(r)}  [new only]" for r in sorted((b - a).elements())]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", type=Path)
    ap.add_argument("--base", default="main", help="git ref of the baseline engine")
    ap.add_argument("--new", help="git ref of the engine to compare (default: this checkout, "
                    "uncommitted changes included)")
    ap.add_argument("--refresh-base", action="store_true")
    ap.add_argument("--quiet", "-q", action="store_true", help="print only differences")
    args = ap.parse_args()
    trees = [t.resolve() for t in args.trees] or default_trees()
    sha, engine = base_engine(args.base)
    new_sha = ""
    if args.new:
        new_sha, new_engine = base_engine(args.new)
        where = f"{args.new} = {new_sha[:10]}"
    else:
        new_engine = ROOT
        dirty = " + uncommitted changes" if git("status", "--porcelain", "maskcheck") else ""
        where = f"{ROOT} ({git('rev-parse', '--short', 'HEAD')}{dirty})"
    print(f"baseline {args.base} = {sha[:10]} ({engine}); new = {where}")
    files = hits = errors = 0
    diffs: list[str] = []
    totals = [0.0, 0.0, 0.0, 0.0]
    for tree in trees:
        base_report, bw, bc = cached_base(sha, engine, tree, args.refresh_base)
        if new_sha:
            new_report, nw, nc = cached_base(new_sha, new_engine, tree, False)
        else:
            new_report, nw, nc = run_engine(new_engine, tree)
        old, new = findings(base_report), findings(new_report)
        here = compare(old, new)
        diffs += here
        files += len(new)
        hits += sum(len(rows) for _, rows in new.values())
        errors += sum(1 for err, _ in new.values() if err is not None)
        for i, v in enumerate((bw, bc, nw, nc)):
            totals[i] += v
        if here or not args.quiet:
            base_t = f"{bw:6.1f} s wall {bc:6.1f} s CPU" if bw else "        (cached)        "
            print(f"{len(here):4d} differences  {len(new):6d} files  base {base_t}  "
                  f"new {nw:6.1f} s wall {nc:6.1f} s CPU  {tree}", flush=True)
        for d in here:
            print("   ", d)
    print(f"\n{len(trees)} trees, {files} files ({errors} error lines), {hits} findings: "
          f"{len(diffs)} differences")
    if totals[0]:
        print(f"baseline runs {totals[0]:.1f} s wall {totals[1]:.1f} s CPU; ", end="")
    print(f"new engine {totals[2]:.1f} s wall {totals[3]:.1f} s CPU")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
