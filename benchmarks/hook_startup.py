"""Start-up cost of the pre-commit hook on one file: `maskcheck check one.py` against
`python -c "import torch"` (what a hook that imported torch would pay per chunk).

    python benchmarks/hook_startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

from _machine import machine, wall_times

ONE = 'import torch\n\ndef f(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n'


def wall(cmd: list[str], repeat: int) -> tuple[float, float]:
    times, _ = wall_times(cmd, repeat)
    return statistics.median(times), min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(machine())
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.py"
        one.write_text(ONE)
        script = Path(py).with_name("maskcheck")
        rows = [
            ("python -c pass", [py, "-c", "pass"]),
            ("python -m maskcheck check one.py", [py, "-m", "maskcheck", "check", str(one)]),
        ]
        if script.exists():
            rows.append(("maskcheck check one.py (console script)", [str(script), "check",
                                                                     str(one)]))
        if importlib.util.find_spec("torch") is not None:
            rows.append(('python -c "import torch"', [py, "-c", "import torch"]))
        results = [(name, *wall(cmd, args.repeat)) for name, cmd in rows]
        torch_med = results[-1][1] if rows[-1][0].endswith('torch"') else None
        print(f"{'command':<42} {'median s':>9} {'best s':>8} {'x import torch':>15}")
        for name, med, best in results:
            ratio = f"{med / torch_med:.2f}" if torch_med else "-"
            print(f"{name:<42} {med:>9.3f} {best:>8.3f} {ratio:>15}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
