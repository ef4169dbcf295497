"""Wall time of `maskcheck check` vs ruff vs torchfix over a source tree (default: the
installed transformers package's models directory).

    python benchmarks/lint_speed.py [TREE] [--repeat 3] [--torchfix-files 150]

torchfix takes minutes on the whole tree (9 min measured), so it runs on the first N files and
its time is scaled to the whole tree; pass --torchfix-files 0 to skip it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _machine import machine, wall_times

BIN = Path(sys.executable).parent


def default_tree() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        raise SystemExit("transformers is not installed: pass a TREE")
    return Path(spec.origin).parent / "models"


def wall(cmd: list[str], repeat: int) -> tuple[float, int]:
    times, code = wall_times(cmd, repeat)
    return statistics.median(times), code


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", nargs="?", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--torchfix-files", type=int, default=150)
    args = ap.parse_args()
    tree = args.tree or default_tree()
    files = sorted(tree.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    print(f"tree: {tree}  ({len(files)} files, {lines / 1e6:.2f} M lines)\n")
    rows: list[tuple[str, float, str]] = []
    print(machine())
    py = sys.executable
    t, code = wall([py, "-m", "maskcheck", "check", "--exit-zero", str(tree)], args.repeat)
    rows.append(("maskcheck check (CLI)", t, f"exit {code}"))
    t, code = wall([py, "-m", "maskcheck.commands.check", "--exit-zero", str(tree)], args.repeat)
    rows.append(("maskcheck check (no Typer)", t, f"exit {code}"))
    ruff = shutil.which("ruff", path=str(BIN)) or shutil.which("ruff")
    if ruff:
        t, code = wall([ruff, "check", "--select", "E,F", "--no-cache", "--isolated",
                        "--exit-zero", "-q", str(tree)], args.repeat)
        rows.append(("ruff check --select E,F --no-cache", t, f"exit {code}"))
    torchfix = shutil.which("torchfix", path=str(BIN)) or shutil.which("torchfix")
    if torchfix and args.torchfix_files:
        sample = files[: args.torchfix_files]
        with tempfile.TemporaryDirectory() as tmp:
            for p in sample:
                dest = Path(tmp) / p.relative_to(tree)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest)
            t, _ = wall([torchfix, tmp], 1)
        rows.append((f"torchfix (est. from {len(sample)} files)", t * len(files) / len(sample),
                     "extrapolated"))
    base = next((r[1] for r in rows if r[0].startswith("ruff")), None)
    print(f"{'tool':<42} {'wall s':>8} {'x ruff':>7}  note")
    for name, t, note in rows:
        ratio = f"{t / base:.2f}" if base else "-"
        print(f"{name:<42} {t:>8.2f} {ratio:>7}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
