from __future__ import annotations

import hashlib
import math
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from maskcheck.io.base import TensorSource

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "fixtures" / "hostile"


def read_all(source: TensorSource) -> np.ndarray:
    rows = math.prod(source.shape[:-1]) if source.shape else 1
    return source.read_rows(0, rows).reshape(source.shape)


def fingerprint(paths: Iterable[Path]) -> dict[str, tuple[str, int]]:
    """sha256 and mtime (ns) of every regular file, to prove nothing was modified."""
    out: dict[str, tuple[str, int]] = {}
    for p in paths:
        if p.is_file() and not p.is_symlink():
            out[os.fsdecode(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(),
                                   p.stat().st_mtime_ns)
    return out


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def maskcheck_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "maskcheck", *args]


@pytest.fixture()
def no_marker() -> Iterable[Path]:
    """The marker the malicious pickles would create; asserted absent afterwards."""
    marker = Path("/tmp/maskcheck-pwned")
    marker.unlink(missing_ok=True)
    yield marker
    assert not marker.exists(), "a malicious pickle was executed"
