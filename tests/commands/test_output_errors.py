"""Output that cannot be written is not a bug: a full device (`> /dev/full`) is one line on
stderr and exit 2, a reader that stops reading (`| head`, `| true`) is quiet. Real CLI
subprocesses, their stdout a full device or a pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(ROOT / "fixtures" / "bug_pytorch_40932.safetensors")
# Many findings: the report is far bigger than a pipe's buffer.
MANY = "".join(f"a{i} = s.masked_fill(m, -1e9)\n" for i in range(3000))
FULL = "/dev/full"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run_into(stdout: int, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "maskcheck", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, env=_env(), timeout=120)


@pytest.fixture
def many(tmp_path: Path) -> Path:
    path = tmp_path / "many_findings.py"
    path.write_text(MANY)
    return path


@pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", [
    ("check", "many_findings.py"),
    ("check", "--format", "json", "many_findings.py"),
    ("check", "--format", "sarif", "many_findings.py"),
    ("check", "--format", "github", "many_findings.py"),
    ("check", "--statistics", "many_findings.py"),
    ("inspect", FIXTURE),
    ("inspect", "--format", "json", FIXTURE),
    ("rules",),
    ("explain", "MC002"),
])
def test_a_full_device_is_one_line_and_exit_2(many: Path, args: tuple[str, ...]) -> None:
    with open(FULL, "w") as full:
        r = _run_into(full.fileno(), *args, cwd=many.parent)
    assert r.returncode == 2, r.stderr
    assert r.stderr == "maskcheck: error: cannot write the output: No space left on device\n"


def test_a_closed_pipe_is_quiet_and_check_still_says_what_it_found(many: Path) -> None:
    clean = many.parent / "clean.py"
    clean.write_text("x = 1\n")
    for args, code in ((["--fail-on", "warning", "many_findings.py"], 1),
                       (["--format", "json", "--fail-on", "warning", "many_findings.py"], 1),
                       (["many_findings.py"], 0), (["clean.py"], 0)):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before anything is written: EPIPE on every write
        try:
            r = _run_into(write, "check", *args, cwd=many.parent)
        finally:
            os.close(write)
        assert (r.returncode, r.stderr) == (code, ""), args


def test_a_reader_that_stops_early_is_quiet(many: Path) -> None:
    for args in (["check", "--fail-on", "warning", "many_findings.py"], ["inspect", FIXTURE]):
        p = subprocess.Popen([sys.executable, "-m", "maskcheck", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=many.parent, env=_env())
        assert p.stdout is not None and p.stderr is not None
        p.stdout.readline()  # `| head -1`
        p.stdout.close()
        code = p.wait(timeout=120)
        stderr = p.stderr.read().decode()
        p.stderr.close()
        assert stderr == "" and code in (1, 2), (args, code, stderr)


def test_inspect_into_a_closed_pipe_is_quiet() -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        r = _run_into(write, "inspect", FIXTURE, cwd=ROOT)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (2, "")
