"""How the lint benchmarks run maskcheck: the one that PYTHONPATH (or the environment) provides,
never a copy that happens to sit in the current directory."""

from __future__ import annotations

import json
import subprocess
import sys

# -P: do not put the current directory first on sys.path, so PYTHONPATH decides which maskcheck
# is measured even when the command runs from a repository root.
MASKCHECK = [sys.executable, "-P", "-m", "maskcheck"]


def maskcheck_location() -> str:
    """The package directory of the maskcheck the benchmarks run."""
    proc = subprocess.run([sys.executable, "-P", "-c",
                           "import maskcheck, os; print(os.path.dirname(maskcheck.__file__))"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("maskcheck is not importable: set PYTHONPATH to a worktree")
    return proc.stdout.strip()


def source_rule_codes() -> set[str]:
    """The codes of the source (lint) rules the measured maskcheck registers."""
    proc = subprocess.run([*MASKCHECK, "rules", "--format", "json"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"maskcheck rules failed: {proc.stderr.strip()[-300:]}")
    return {rule["code"] for rule in json.loads(proc.stdout) if rule.get("kind") == "source"}
