"""The one error handler: usage errors are exit 2 with one message, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maskcheck", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args", [
    ("inspect", "--bogus", "x.safetensors"),
    ("nosuchcommand",),
    ("inspect",),
    ("inspect", "fixtures/sdpa_bool_causal.safetensors", "--api", "nope"),
    ("inspect", "fixtures/sdpa_bool_causal.safetensors", "--select", "MC999"),
    ("explain", "MC999"),
])
def test_usage_errors_exit_2_without_traceback(args: tuple[str, ...]) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip()


def test_version() -> None:
    from maskcheck import __version__

    proc = run("--version")
    assert (proc.returncode, proc.stdout.strip()) == (0, f"maskcheck {__version__}")


def test_check_path_starts_without_typer_numpy_or_torch(tmp_path: object) -> None:
    code = (
        "import sys\n"
        "from maskcheck.cli import main\n"
        "rc = main(['check', 'fixtures/make_fixtures.py', '--exit-zero'])\n"
        "heavy = [m for m in ('torch', 'numpy', 'typer', 'rich') if m in sys.modules]\n"
        "print(rc, heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == "0 []", proc.stdout + proc.stderr


@pytest.mark.parametrize("args", [
    ["simulate", "--seq", "5", "--pad", "3"],
    ["replay", "fixtures/captures/mha_fully_padded.safetensors"],
])
def test_torch_commands_without_torch_are_a_usage_error(args: list[str]) -> None:
    code = ("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
            "from maskcheck.cli import main\n"
            f"raise SystemExit(main({args!r}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'maskcheck[torch]'" in proc.stderr
    assert "Traceback" not in proc.stderr
