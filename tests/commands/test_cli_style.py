"""One argument-error style, -h everywhere, help with metavars and full command summaries."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

COMMANDS = ("inspect", "check", "simulate", "replay", "rules", "explain")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "maskcheck", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_bare_maskcheck_prints_help_and_exits_0() -> None:
    r = run()
    assert r.returncode == 0 and r.stdout.startswith("Usage: maskcheck") and not r.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_h_and_metavars(command: str) -> None:
    r = run(command, "-h")
    assert r.returncode == 0, r.stderr
    assert r.stdout == run(command, "--help").stdout
    # Metavars, never Python types (`<list[Path]>`, `<int range>`) or `{PATH}`.
    assert not re.search(r"<[a-z][\w\[\], ]*>|\{[A-Za-z]+\}", r.stdout), r.stdout


def test_command_summaries_are_whole() -> None:
    out = run("-h").stdout
    assert "..." not in out.split("Commands:")[1]
    assert "what is wrong with it." in " ".join(out.split())


@pytest.mark.parametrize(("args", "message", "command"), [
    (("inspect", "--bogus", "x.safetensors"), "unrecognized arguments: --bogus", "inspect"),
    (("replay", "--bogus", "x.safetensors"), "No such option: --bogus", "replay"),
    (("check", "--bogus", "x.py"), "unrecognized arguments: --bogus", "check"),
    (("simulate", "--seq", "abc"), "Invalid value for '--seq'", "simulate"),
    (("replay",), "Missing argument 'PATH'", "replay"),
    (("check",), "the following arguments are required: PATH", "check"),
    (("nosuchcommand",), "No such command 'nosuchcommand'", None),
])
def test_one_argument_error_style(args: tuple[str, ...], message: str,
                                  command: str | None) -> None:
    r = run(*args)
    assert r.returncode == 2 and not r.stdout
    where = f"maskcheck {command}" if command else "maskcheck"
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith("maskcheck: error: ") and message in lines[0], r.stderr
    assert lines[1] == f"Run '{where} -h' for help."


def test_inspect_of_one_file_imports_no_typer_pydantic_pygments_or_multiprocessing() -> None:
    # What made `inspect` of a small file cost 3.5x the import of numpy + rich + safetensors
    # (benchmarks/inspect_startup.py); the output must not need any of them.
    code = ("import sys\nfrom maskcheck.cli import main\n"
            "rc = main(['inspect', 'fixtures/sdpa_bool_causal.safetensors'])\n"
            "heavy = ('typer', 'pydantic', 'pygments', 'concurrent.futures.process', 'torch')\n"
            "print(rc, [m for m in heavy if m in sys.modules])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=False, cwd=os.path.dirname(os.path.dirname(
                           os.path.dirname(os.path.abspath(__file__)))))
    assert r.stdout.splitlines()[-1] == "0 []", r.stdout + r.stderr
