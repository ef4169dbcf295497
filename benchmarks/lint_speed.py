"""Wall and CPU time of `maskcheck check` vs ruff (and torchfix) over a source tree (default:
the installed transformers package's models directory).

    python benchmarks/lint_speed.py [TREE] [--repeat 3] [--baseline REF] [--torchfix-files 150]

The commands run in turn, once each per round, `--repeat` rounds (so a busy moment of a shared
machine falls on all of them alike), after one untimed round that warms the page cache and
writes bytecode caches (PYTHONDONTWRITEBYTECODE is dropped for the commands: an installed
package has its caches, and without them every run compiles maskcheck's modules again, about
0.5 s of CPU). Each row gives the minimum and every round's wall time, and the CPU time (user +
system, the workers included) of the same runs. `--baseline REF` adds a row for the engine of a
git ref (its `maskcheck/` extracted as benchmarks/lint_equivalence.py does), for a before/after
on the same box.

torchfix takes minutes on the whole tree (9 min measured), so it runs on the first N files and
its time is scaled to the whole tree; pass --torchfix-files 0 to skip it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import machine

BIN = Path(sys.executable).parent


def default_tree() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        raise SystemExit("transformers is not installed: pass a TREE")
    return Path(spec.origin).parent / "models"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the command and its children) and the exit code of one run."""
    before = os.times()
    start = time.perf_counter()
    code = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=env).returncode
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system)
    return wall, cpu, code


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", nargs="?", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", metavar="REF", help="also time the engine of this git ref")
    ap.add_argument("--torchfix-files", type=int, default=150)
    args = ap.parse_args()
    tree = args.tree or default_tree()
    files = sorted(tree.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    size = sum(p.stat().st_size for p in files)
    print(f"tree: {tree}  ({len(files)} files, {lines / 1e6:.2f} M lines, {size / 1e6:.1f} MB)")
    print(machine())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    py = sys.executable
    here = str(Path(__file__).resolve().parent.parent)
    rows: list[tuple[str, list[str], dict[str, str]]] = [
        ("maskcheck check (CLI)", [py, "-m", "maskcheck", "check", "--exit-zero", str(tree)], env),
        ("maskcheck check (no Typer)",
         [py, "-P", "-m", "maskcheck.commands.check", "--exit-zero", str(tree)],
         {**env, "PYTHONPATH": here}),
    ]
    if args.baseline:
        from lint_equivalence import base_engine

        sha, engine = base_engine(args.baseline)
        rows.append((f"maskcheck check at {args.baseline} ({sha[:7]})",
                     [py, "-P", "-m", "maskcheck.commands.check", "--exit-zero", str(tree)],
                     {**env, "PYTHONPATH": str(engine)}))
    ruff = shutil.which("ruff", path=str(BIN)) or shutil.which("ruff")
    if ruff:
        rows.append(("ruff check --select E,F --no-cache",
                     [ruff, "check", "--select", "E,F", "--no-cache", "--isolated",
                      "--exit-zero", "-q", str(tree)], env))
    for _, cmd, cmd_env in rows:  # page cache and bytecode caches
        timed(cmd, cmd_env)
    walls: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    codes: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, cmd, cmd_env in rows:
            wall, cpu, codes[name] = timed(cmd, cmd_env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    table = [(name, min(walls[name]), min(cpus[name]), ", ".join(f"{t:.1f}" for t in walls[name]),
              ", ".join(f"{t:.1f}" for t in cpus[name]), f"exit {codes[name]}")
             for name, _, _ in rows]
    torchfix = shutil.which("torchfix", path=str(BIN)) or shutil.which("torchfix")
    if torchfix and args.torchfix_files:
        sample = files[: args.torchfix_files]
        with tempfile.TemporaryDirectory() as tmp:
            for p in sample:
                dest = Path(tmp) / p.relative_to(tree)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest)
            wall, cpu, _ = timed([torchfix, tmp], env)
        scale = len(files) / len(sample)
        table.append((f"torchfix (est. from {len(sample)} files)", wall * scale, cpu * scale,
                      "", "", "extrapolated"))
    base = next((r for r in table if r[0].startswith("ruff")), None)
    print(f"\n{'command':<42} {'wall s':>7} {'x ruff':>7} {'CPU s':>7} {'x ruff':>7}  "
          "every round (wall; CPU)")
    for name, wall, cpu, all_walls, all_cpus, note in table:
        wall_ratio = f"{wall / base[1]:.2f}" if base else "-"
        cpu_ratio = f"{cpu / base[2]:.2f}" if base else "-"
        print(f"{name:<42} {wall:>7.2f} {wall_ratio:>7} {cpu:>7.2f} {cpu_ratio:>7}  "
              f"{all_walls}; {all_cpus}  {note}")
    print("\n(minimum over the rounds; the commands alternate within each round)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
