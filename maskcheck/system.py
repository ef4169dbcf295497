"""Facts about the machine that several commands need (standard library only: the hook path)."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on: the bound for --jobs (more workers only cost memory)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
