"""The Typer app: parse options, call the library, render, map to exit codes.

Each command lives in `maskcheck/commands/<name>.py` and returns an exit code; this module is
the only place that exits, and the one error handler that maps failures to CONTRACT codes.
Typer is imported only when the app is built: `maskcheck check` (the pre-commit path) and
`maskcheck inspect` parse their options with argparse and start without it (`-h` of every
command still comes from Typer). Argument errors of either parser print the same two lines.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from maskcheck import __version__
from maskcheck.errors import (
    OUTPUT_ERRNOS,
    MaskcheckError,
    OutputError,
    UsageError,
    discard_stdout,
    one_line,
    output_error,
)

if TYPE_CHECKING:
    import typer

_COMMAND_MODULES = ("inspect", "check", "simulate", "replay", "probe", "rules")
# Command name -> the module that registers it (start-up imports only what runs).
_MODULE_OF = {name: name for name in _COMMAND_MODULES} | {"explain": "rules"}


def build_app(args: Sequence[str] = ()) -> typer.Typer:
    """The Typer app with the command named in `args` (all commands when none is)."""
    import typer

    app = typer.Typer(
        name="maskcheck",
        help="Attention-mask linter and debugger for PyTorch.",
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings=HELP_SETTINGS,
    )

    def version_callback(value: bool) -> None:
        if value:
            typer.echo(f"maskcheck {__version__}")
            raise typer.Exit(0)

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=version_callback, is_eager=True,
            help="Print the version."),
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks of internal errors."),
    ) -> None:
        if debug:
            os.environ["MASKCHECK_DEBUG"] = "1"

    command = next((a for a in args if not a.startswith("-")), None)
    wanted = _MODULE_OF.get(command or "")
    for name in (wanted,) if wanted else _COMMAND_MODULES:
        importlib.import_module(f"maskcheck.commands.{name}").register(app)
    _uniform_help(app)
    return app


HELP_SETTINGS = {"help_option_names": ["-h", "--help"]}


def _uniform_help(app: typer.Typer) -> None:
    """Every command, whoever registered it: -h, metavars in help, its full summary line."""
    from typer.core import TyperCommand

    from maskcheck.commands.help_format import MetavarCommand

    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = MetavarCommand
        info.context_settings = {**HELP_SETTINGS, **(info.context_settings or {})}
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            info.short_help = info.callback.__doc__.strip().splitlines()[0]


def _click_exceptions() -> ModuleType:
    try:  # typer >= 0.16 vendors click
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def debug_requested(args: Sequence[str]) -> bool:
    return "--debug" in args or os.environ.get("MASKCHECK_DEBUG") == "1"


def guarded(run: Callable[[], int], *, debug: bool, typer_app: bool = False) -> int:
    """The one error handler: run a command and map what it raises to CONTRACT exit codes."""
    try:
        result = run()
        # what is still buffered is written now, where a failure is handled, not at exit
        if sys.stdout is not None:
            sys.stdout.flush()
        return result
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except UsageError as e:
        print_usage_error(str(e), e.command)
        return 2
    except BrokenPipeError:
        # the reader stopped reading (`| head`): nothing to say, and nothing more to write
        discard_stdout()
        return 2
    except OutputError as e:
        return _output_failed(e)
    except OSError as e:
        if e.filename is None and e.errno in OUTPUT_ERRNOS:
            # writing stdout failed (`> /dev/full`): where the output goes, not a bug
            return _output_failed(output_error(e))
        return _internal_error(e, debug)
    except MaskcheckError as e:  # FileProblem included: exit 2
        print(f"maskcheck: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maskcheck: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if isinstance(e, ModuleNotFoundError) and e.name == "torch":
            print("maskcheck: error: this command runs torch, which is not installed: "
                  "pip install 'maskcheck[torch]'", file=sys.stderr)
            return 2
        code = _typer_exception(e) if typer_app else None
        if code is not None:
            return code
        return _internal_error(e, debug)


def _output_failed(e: OutputError) -> int:
    discard_stdout()
    print(f"maskcheck: error: {one_line(str(e))}", file=sys.stderr)
    return 2


def _internal_error(e: Exception, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    else:
        print(
            f"maskcheck: internal error: {type(e).__name__}: {e} "
            "(this is a bug; rerun with --debug for the traceback)",
            file=sys.stderr,
        )
    return 3


def print_usage_error(message: str, help_for: str | None) -> None:
    """The one style of every argument error, whichever parser found it (Typer or argparse).

    `help_for`: the command whose `-h` lists the options ("" for the tool's own); None for a
    bad value of an option, whose message already says what the option takes.
    """
    print(f"maskcheck: error: {message}", file=sys.stderr)
    if help_for is not None:
        where = f"maskcheck {help_for}" if help_for else "maskcheck"
        print(f"Run '{where} -h' for help.", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        args = ["--help"]  # bare `maskcheck`: the help, exit 0 (asking is not an error)
    if args[:1] == ["check"] and not {"--help", "-h"} & set(args):
        # The pre-commit path: Typer's import alone costs more than the whole check of a
        # file, so `check` parses its options with argparse (same options, same exit codes;
        # `check --help` still comes from Typer).
        from maskcheck.commands.check import main as check_main

        return check_main(args[1:])
    if args[:1] == ["inspect"] and not {"--help", "-h"} & set(args):
        # Typer's parameter building imports pydantic (~0.25 s of CPU): the same options,
        # parsed by argparse from inspect_command's own declarations.
        from maskcheck.commands.declare import run_with_argparse
        from maskcheck.commands.inspect import inspect_command

        return guarded(lambda: run_with_argparse("inspect", inspect_command, args[1:]),
                       debug=debug_requested(args))

    def run() -> int:
        result = build_app(args)(args=args, prog_name="maskcheck", standalone_mode=False)
        return int(result or 0)

    return guarded(run, debug=debug_requested(args), typer_app=True)


def _typer_exception(e: Exception) -> int | None:
    """Exit code for Typer's/Click's own exceptions; None for anything else."""
    import typer

    ce = _click_exceptions()
    exits = tuple(c for c in (typer.Exit, getattr(ce, "Exit", None)) if isinstance(c, type))
    aborts = tuple(c for c in (typer.Abort, getattr(ce, "Abort", None)) if isinstance(c, type))
    if isinstance(e, exits):
        return int(getattr(e, "exit_code", 0))
    if isinstance(e, ce.UsageError):
        ctx = getattr(e, "ctx", None)
        path = ctx.command_path if ctx is not None else "maskcheck"
        print_usage_error(e.format_message(), path.partition(" ")[2])
        return 2
    if isinstance(e, ce.ClickException):
        e.show()
        return 2
    if isinstance(e, aborts):
        return 130
    return None
