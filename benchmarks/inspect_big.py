"""Benchmark 4a: `maskcheck inspect` of 512 MiB masks against the least work that answers one
question about them.

    python benchmarks/inspect_big.py [--dir DIR] [--repeat N] [--scale K]

Two masks are written once (streamed, so writing them needs no 512 MiB of memory) as
.safetensors files: a bool causal + right-padding mask (8, 1, 8192, 8192) and a float16
additive causal + padding mask (4, 1, 8192, 8192) holding 0 and finfo(float16).min. The page
cache is warmed, then each command runs N times as its own process; the table shows the best
wall time and that process's peak RSS (ru_maxrss from os.wait4).

Baseline ("numpy"): `safetensors.numpy.load_file` then one reduction over the last axis
(`.any(-1)` for bool, `.max(-1)` for float16), in a fresh interpreter: the least work that
answers one question (which rows keep a key / what each row's largest value is).
Reference ("torch", when torch is installed): `safetensors.torch.load_file` then `.any(-1)` /
`.amax(-1)`. Targets (issue 5, 4a): maskcheck at most 1.5x the numpy baseline, running every
rule, with a peak RSS below the file's size.

`--scale K` divides the key and query length by K for a quick run (K=4: 32 MiB files).
Ratios are measured in the same run; absolute times on shared machines drift.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MiB = 1024 * 1024

ST_DTYPE = {"bool": "BOOL", "float16": "F16", "float32": "F32", "uint8": "U8", "int64": "I64"}


# ---------------------------------------------------------------------------------- files

def write_safetensors(
    path: Path, name: str, dtype: str, shape: tuple[int, ...],
    matrices: Callable[[], Iterator[np.ndarray]],
) -> None:
    """Write one tensor, matrix by matrix, with a header of our own (bounded memory)."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    header = {name: {"dtype": ST_DTYPE[dtype], "shape": list(shape), "data_offsets": [0, nbytes]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        written = 0
        for m in matrices():
            data = np.ascontiguousarray(m, dtype=dtype)
            f.write(data.data)
            written += data.nbytes
    if written != nbytes:
        raise RuntimeError(f"{path}: wrote {written} bytes, expected {nbytes}")
    tmp.replace(path)


def causal_padding(L: int, S: int, pad: int) -> np.ndarray:
    """Keep = True: causal, and the last `pad` keys are padding."""
    keep = np.tri(L, S, dtype=bool)
    if pad:
        keep[:, S - pad:] = False
    return keep


def bool_mask_file(directory: Path, batch: int, L: int, S: int) -> Path:
    path = directory / f"bool_causal_padding_{batch}x1x{L}x{S}.safetensors"
    if not path.exists():
        def mats() -> Iterator[np.ndarray]:
            for b in range(batch):
                yield causal_padding(L, S, (S // 16) * b)
        write_safetensors(path, "attention_mask", "bool", (batch, 1, L, S), mats)
    return path


def fp16_mask_file(directory: Path, batch: int, L: int, S: int) -> Path:
    path = directory / f"fp16_additive_{batch}x1x{L}x{S}.safetensors"
    if not path.exists():
        masked = np.float16(np.finfo(np.float16).min)

        def mats() -> Iterator[np.ndarray]:
            for b in range(batch):
                keep = causal_padding(L, S, (S // 16) * b)
                yield np.where(keep, np.float16(0), masked)
        write_safetensors(path, "attn_mask", "float16", (batch, 1, L, S), mats)
    return path


def warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 * MiB):
            pass


# -------------------------------------------------------------------------------- running

@dataclass
class Timing:
    label: str
    wall_s: float
    peak_rss_mib: float
    rc: int


# Spawned by a small launcher: a child's ru_maxrss includes the RSS of the process that
# forked it (Linux carries the hiwater mark across exec), so the benchmark's own memory must
# not be the parent. The launcher is a bare interpreter (~10 MiB) that reports wall time,
# exit status and peak RSS of the command it runs.
_LAUNCHER = """
import json, os, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, usage = os.wait4(p.pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"wall": wall, "rss_kib": usage.ru_maxrss, "rc": os.waitstatus_to_exitcode(status),
               "err": err.decode(errors="replace")[-500:]}, f)
"""


def run_once(argv: Sequence[str]) -> tuple[float, float, int]:
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        subprocess.run([PYTHON, "-S", "-c", _LAUNCHER, out.name, *argv], cwd=REPO, check=True)
        result = json.load(out)
    if result["rc"] not in (0, 1) and result["err"].strip():
        print(f"  ! {' '.join(argv[:4])}...: {result['err'].strip().splitlines()[-1]}",
              file=sys.stderr)
    return result["wall"], result["rss_kib"] / 1024, result["rc"]  # ru_maxrss: KiB on Linux


def measure(label: str, argv: Sequence[str], repeat: int) -> Timing:
    runs = [run_once(argv) for _ in range(repeat)]
    best = min(runs, key=lambda r: r[0])
    return Timing(label, best[0], max(r[1] for r in runs), best[2])


def baseline_numpy(path: Path, reduce: str) -> list[str]:
    code = ("import sys; from safetensors.numpy import load_file; "
            f"m = next(iter(load_file(sys.argv[1]).values())); m.{reduce}(-1)")
    return [PYTHON, "-c", code, str(path)]


def baseline_torch(path: Path, reduce: str) -> list[str]:
    code = ("import sys; from safetensors.torch import load_file; "
            f"m = next(iter(load_file(sys.argv[1]).values())); m.{reduce}(-1)")
    return [PYTHON, "-c", code, str(path)]


def python_floor(module: str = "numpy") -> list[str]:
    return [PYTHON, "-c", f"import {module}"]


def has_torch() -> bool:
    probe = subprocess.run([PYTHON, "-c", "import torch, safetensors.torch"],
                           capture_output=True, check=False)
    return probe.returncode == 0


def maskcheck_command(path: Path) -> tuple[str, list[str]]:
    """`maskcheck inspect FILE` when the CLI can read safetensors here; else the same analysis
    (every rule) through this script's own bounded safetensors reader, so the numbers exist
    while the loaders are being written. The label says which ran."""
    cli = [PYTHON, "-m", "maskcheck", "inspect", str(path)]
    probe = subprocess.run(cli, cwd=REPO, capture_output=True, check=False)
    if probe.returncode in (0, 1):
        return "maskcheck inspect", cli
    child = [PYTHON, str(Path(__file__).resolve()), "--child", str(path)]
    loader = subprocess.run([PYTHON, "-c", "import maskcheck.io.safetensors_file"], cwd=REPO,
                            capture_output=True, check=False)
    if loader.returncode == 0:
        return "analyze_source (maskcheck.io)", [*child, "--loader", "maskcheck"]
    return "analyze_source (own reader)", [*child, "--loader", "own"]


# ------------------------------------------------------- fallback reader (child process)

class PreadSource:
    """A safetensors tensor read in row blocks with os.preadv into a fresh buffer per block:
    nothing of the file stays mapped, so peak RSS is a block, not the file."""

    NP: ClassVar[dict[str, type[np.generic]]] = {
        "BOOL": np.bool_, "F16": np.float16, "F32": np.float32, "U8": np.uint8, "I64": np.int64}

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        (n,) = struct.unpack("<Q", os.pread(self._fd, 8, 0))
        header = json.loads(os.pread(self._fd, n, 8))
        name, info = next((k, v) for k, v in header.items() if k != "__metadata__")
        self.name = name
        self.shape = tuple(int(d) for d in info["shape"])
        self._np = np.dtype(self.NP[info["dtype"]])
        self.dtype = self._np.name
        self._base = 8 + n + int(info["data_offsets"][0])
        self._cols = self.shape[-1]

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        row_bytes = self._cols * self._np.itemsize
        out = np.empty((stop - start, self._cols), self._np)
        got = os.preadv(self._fd, [out.data.cast("B")], self._base + start * row_bytes)
        if got != out.nbytes:
            raise ValueError(f"truncated: read {got} of {out.nbytes} bytes")
        return out


def child(path: str, loader: str) -> int:
    sys.path.insert(0, str(REPO))
    from maskcheck.analysis.pipeline import analyze_source

    if loader == "maskcheck":
        from maskcheck.io.safetensors_file import open_safetensors

        with open_safetensors(path) as loaded:
            for source in loaded.tensors:
                report = analyze_source(source)
                print(report.convention, report.pattern, [f.code for f in report.findings])
        return 0
    report = analyze_source(PreadSource(path))
    print(report.convention, report.pattern, [f.code for f in report.findings])
    return 0


# ------------------------------------------------------------------------------- tables

def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import safetensors

    parts = [f"nproc {os.cpu_count()}", f"CPU {cpu}", f"Python {platform.python_version()}",
             f"numpy {np.__version__}", f"safetensors {safetensors.__version__}"]
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
    except ImportError:
        pass
    return ", ".join(parts)


def print_table(title: str, file_mib: float, rows: list[Timing], base: Timing) -> None:
    print(f"\n{title}  (file {file_mib:.0f} MiB)")
    print(f"  {'command':36s} {'wall s':>8s} {'x numpy':>8s} {'peak RSS MiB':>13s} "
          f"{'RSS/file':>9s}")
    for t in rows:
        print(f"  {t.label:36s} {t.wall_s:8.2f} {t.wall_s / base.wall_s:8.2f} "
              f"{t.peak_rss_mib:13.0f} {t.peak_rss_mib / file_mib:9.2f}"
              + ("" if t.rc in (0, 1) else f"  (exit {t.rc})"))


def in_process_table(path: Path, reduce: str) -> None:
    """The same analysis without process start-up or the file: summarize() of an in-memory
    array against numpy reductions over the last axis, same process."""
    sys.path.insert(0, str(REPO))
    from safetensors.numpy import load_file

    from maskcheck.analysis.summary import summarize
    from maskcheck.io.base import ArraySource

    m = next(iter(load_file(str(path)).values()))
    timings: list[tuple[str, float]] = []
    sum_dtype = np.float32 if m.dtype == np.float16 else None  # no float16 overflow
    work: list[tuple[str, Callable[[], object]]] = [
        (f"numpy m.{reduce}(-1)", lambda: getattr(m, reduce)(-1)),
        ("numpy m.sum(-1)", lambda: m.sum(-1, dtype=sum_dtype)),
        ("summarize(ArraySource(m))", lambda: summarize(ArraySource("m", m))),
    ]
    for label, fn in work:
        best = math.inf
        for _ in range(2):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        timings.append((label, best))
    base = timings[0][1]
    print("  in-process, array in memory: " + "; ".join(
        f"{label} {t:.3f} s ({t / base:.1f}x)" for label, t in timings))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None, help="where the mask files live")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="divide L and S by this (quick run)")
    ap.add_argument("--no-in-process", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--loader", default="own", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.loader)
    directory = args.dir or Path(tempfile.gettempdir()) / "maskcheck-bench"
    directory.mkdir(parents=True, exist_ok=True)
    n = 8192 // args.scale
    cases = [
        (f"bool causal + padding (8, 1, {n}, {n})", bool_mask_file(directory, 8, n, n), "any"),
        (f"float16 additive (4, 1, {n}, {n})", fp16_mask_file(directory, 4, n, n), "max"),
    ]
    print(f"machine: {machine()}")
    torch_ok = has_torch()
    floor = measure("python -c 'import numpy'", python_floor(), args.repeat)
    if torch_ok:
        torch_floor = measure("python -c 'import torch'", python_floor("torch"), args.repeat)
    ok = True
    for title, path, reduce in cases:
        warm(path)
        file_mib = path.stat().st_size / MiB
        base = measure(f"numpy load_file + .{reduce}(-1)", baseline_numpy(path, reduce),
                       args.repeat)
        rows = [floor, base]
        if torch_ok:
            rows.append(torch_floor)
            torch_reduce = "any" if reduce == "any" else "amax"
            rows.append(measure(f"torch load_file + .{torch_reduce}(-1)",
                                baseline_torch(path, torch_reduce), args.repeat))
        label, cmd = maskcheck_command(path)
        mine = measure(label, cmd, args.repeat)
        rows.append(mine)
        print_table(title, file_mib, rows, base)
        ratio = mine.wall_s / base.wall_s
        rss_ok = mine.peak_rss_mib < file_mib
        print(f"  target: <= 1.5x numpy: {ratio:.2f}x {'PASS' if ratio <= 1.5 else 'FAIL'}; "
              f"peak RSS < file: {mine.peak_rss_mib:.0f} < {file_mib:.0f} MiB "
              f"{'PASS' if rss_ok else 'FAIL'}")
        ok = ok and ratio <= 1.5 and rss_ok
        if not args.no_in_process:
            in_process_table(path, reduce)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
