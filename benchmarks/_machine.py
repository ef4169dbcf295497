"""What every benchmark prints about the machine, and a wall-clock timer for commands."""

from __future__ import annotations

import os
import platform
import subprocess
import time


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    load = f" load {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}{load}"


def wall_times(cmd: list[str], repeat: int) -> tuple[list[float], int]:
    """Wall seconds of each of `repeat` runs of `cmd`, and the last exit code."""
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        code = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode
        times.append(time.perf_counter() - start)
    return times, code
