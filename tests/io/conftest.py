from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
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


def unprivileged_prefix() -> list[str] | None:
    """How to run a command as a user that file modes apply to; None where there is no way.

    Root reads files whatever their mode, and CI runs as root too: there `setpriv` (util-linux)
    drops to nobody with no groups and no capabilities. A non-root user needs nothing.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import maskcheck"], cwd="/",
                           env=cli_env(), capture_output=True, timeout=120, check=False)
    return prefix if probe.returncode == 0 else None


@pytest.fixture()
def as_nobody() -> list[str]:
    prefix = unprivileged_prefix()
    if prefix is None:
        pytest.skip("no way to run as an unprivileged user here (root without setpriv)")
    return prefix


@pytest.fixture()
def shared_dir() -> Iterable[Path]:
    """A directory every user can enter (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="maskcheck-test-"))
    path.chmod(0o755)
    yield path
    for p in path.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    shutil.rmtree(path)
