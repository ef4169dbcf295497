"""Fuzz the loaders for longer than the test-suite does.

    python benchmarks/fuzz_loaders.py [--runs N] [--seconds S] [--seed K] [--kind .npy]

Each run writes one corrupted .safetensors/.npy/.npz (tests/io/fuzz/fuzz_cases.py: valid
files mutated at random, junk headers, random bytes), opens it with maskcheck.io.open_file and
reads every tensor in small blocks. Allowed outcomes: it loads, or a one-line FileProblem. Any
other exception is a crash: its case is saved under benchmarks/_work/fuzz-crashes/ and printed.
Prints the run count, the outcome counts and the crashes; exits 1 if there was a crash.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "io" / "fuzz")]

from fuzz_cases import MAKERS, check_file, make_case  # noqa: E402

CRASHES = ROOT / "benchmarks" / "_work" / "fuzz-crashes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=sorted(MAKERS), default=None)
    args = parser.parse_args()
    print(f"# {platform.machine()} nproc={os.cpu_count()} python={platform.python_version()} "
          f"seed={args.seed}")
    outcomes: Counter[str] = Counter()
    crashes: list[str] = []
    start = time.perf_counter()
    runs = 0
    with tempfile.TemporaryDirectory(prefix="maskcheck-fuzz-") as tmp:
        for i in range(args.runs):
            if args.seconds is not None and time.perf_counter() - start > args.seconds:
                break
            rng = random.Random(f"{args.seed}:{i}")
            suffix, data = make_case(rng, args.kind)
            path = Path(tmp) / f"case{suffix}"
            path.write_bytes(data)
            runs += 1
            try:
                outcomes[f"{suffix} {check_file(path, rng)}"] += 1
            except Exception as e:  # the point of a fuzzer: anything but FileProblem is a bug
                CRASHES.mkdir(parents=True, exist_ok=True)
                saved = CRASHES / f"crash-{args.seed}-{i}{suffix}"
                saved.write_bytes(data)
                crashes.append(f"run {i}: {type(e).__name__}: {e} -> {saved}")
                traceback.print_exc()
            if path.read_bytes() != data:
                crashes.append(f"run {i}: the input file was modified")
    elapsed = time.perf_counter() - start
    print(f"runs: {runs} in {elapsed:.1f} s ({runs / max(elapsed, 1e-9):.0f}/s)")
    for key in sorted(outcomes):
        print(f"  {key}: {outcomes[key]}")
    print(f"crashes: {len(crashes)}")
    for c in crashes[:50]:
        print("  " + c)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
