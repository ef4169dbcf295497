"""Benchmark 4e: how time and peak memory grow with the mask.

    python benchmarks/scaling.py [--dir DIR] [--repeat N] [--dtype bool|float16]

Four bool causal + padding masks (or float16 additive ones), from 16 MiB to 1 GiB
((1, 1, 4096, 4096), (1, 1, 8192, 8192), (4, 1, 8192, 8192), (16, 1, 8192, 8192)), are
written once as .safetensors files and inspected, each in its own process with a warm page
cache. The table shows the best wall time, throughput and peak RSS of `maskcheck inspect`
(or the same analysis through inspect_big's bounded reader while the CLI cannot read the
file), beside `safetensors.numpy.load_file` + one reduction over the last axis. Time should
grow with the bytes; maskcheck's memory should stay flat (a block, not the file), the
baseline's grows with the file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inspect_big import (
    MiB,
    baseline_numpy,
    bool_mask_file,
    fp16_mask_file,
    machine,
    maskcheck_command,
    measure,
    warm,
)

SIZES = [(1, 4096), (1, 8192), (4, 8192), (16, 8192)]  # (batch, L = S)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dtype", choices=["bool", "float16"], default="bool")
    args = ap.parse_args(argv)
    directory = args.dir or Path(tempfile.gettempdir()) / "maskcheck-bench"
    directory.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    make = bool_mask_file if args.dtype == "bool" else fp16_mask_file
    reduce = "any" if args.dtype == "bool" else "max"
    label = ""
    print(f"\n{args.dtype} causal + padding masks, warm page cache")
    print(f"  {'shape':22s} {'file MiB':>9s} {'maskcheck s':>12s} {'MiB/s':>7s} "
          f"{'peak RSS MiB':>13s} {'numpy s':>8s} {'numpy RSS MiB':>14s} {'x numpy':>8s}")
    rss: list[float] = []
    for batch, n in SIZES:
        path = make(directory, batch, n, n)
        warm(path)
        size = path.stat().st_size / MiB
        label, cmd = maskcheck_command(path)
        mine = measure(label, cmd, args.repeat)
        base = measure("numpy", baseline_numpy(path, reduce), args.repeat)
        rss.append(mine.peak_rss_mib)
        shape = f"({batch}, 1, {n}, {n})"
        print(f"  {shape:22s} {size:9.0f} {mine.wall_s:12.2f} {size / mine.wall_s:7.0f} "
              f"{mine.peak_rss_mib:13.0f} {base.wall_s:8.2f} {base.peak_rss_mib:14.0f} "
              f"{mine.wall_s / base.wall_s:8.2f}")
    print(f"  maskcheck command: {label}")
    growth = SIZES[-1][0] * SIZES[-1][1] ** 2 // (SIZES[0][0] * SIZES[0][1] ** 2)
    print(f"  peak RSS from smallest to largest file: {rss[0]:.0f} -> {rss[-1]:.0f} MiB "
          f"({rss[-1] / rss[0]:.2f}x for {growth}x the bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
