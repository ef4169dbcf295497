"""Start-up cost of `maskcheck inspect` on one small mask file, against importing what it
cannot do without (numpy + rich + safetensors) and against an interpreter that does nothing.

    python benchmarks/inspect_startup.py [--repeat 9]

CPU seconds (user + sys of the child, from os.wait4), not wall time: on a shared machine
wall time measures the neighbours. Runs are interleaved so load drifts hit every row alike;
the figure to read is the ratio, inspect / (numpy + rich + safetensors), of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import machine


def cpu_seconds(cmd: list[str]) -> float:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    print(machine())
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        mask = Path(tmp) / "causal.safetensors"
        subprocess.run([py, "-c", "import sys, numpy as np; from safetensors.numpy import "
                        "save_file; save_file({'attn_mask': np.tril(np.ones((8, 8), bool))}, "
                        "sys.argv[1])", str(mask)], check=True)
        rows = {
            "python -c pass": [py, "-c", "pass"],
            "import numpy, rich, safetensors": [py, "-c", "import numpy, rich, safetensors"],
            "maskcheck inspect small.safetensors": [py, "-m", "maskcheck", "inspect", str(mask)],
            "maskcheck inspect --format json": [py, "-m", "maskcheck", "inspect", "--format",
                                                "json", str(mask)],
        }
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.repeat):
            for name, cmd in rows.items():
                times[name].append(cpu_seconds(cmd))
    base = statistics.median(times["import numpy, rich, safetensors"])
    print(f"{'command':<40} {'median CPU s':>12} {'best':>7} {'x imports':>10}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<40} {med:>12.3f} {min(ts):>7.3f} {med / base:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
