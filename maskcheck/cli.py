"""The Typer app: parse options, call the library, render, map to exit codes.

Each command lives in `maskcheck/commands/<name>.py` and returns an exit code; this module is
the only place that exits, and the one error handler that maps failures to CONTRACT codes.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

import typer

from maskcheck import __version__
from maskcheck.errors import MaskcheckError, UsageError

app = typer.Typer(
    name="maskcheck",
    help="Attention-mask linter and debugger for PyTorch.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_COMMAND_MODULES = ("inspect", "check", "simulate", "replay", "rules")
# Command name -> the module that registers it (start-up imports only what runs).
_MODULE_OF = {name: name for name in _COMMAND_MODULES} | {"explain": "rules"}


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"maskcheck {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks of internal errors."),
) -> None:
    if debug:
        os.environ["MASKCHECK_DEBUG"] = "1"


def _register_commands(args: Sequence[str] = ()) -> None:
    import importlib

    command = next((a for a in args if not a.startswith("-")), None)
    wanted = _MODULE_OF.get(command or "")
    for name in (wanted,) if wanted else _COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"maskcheck.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"maskcheck.commands.{name}":
                continue
            raise
        mod.register(app)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("MASKCHECK_DEBUG") == "1"
    try:
        _register_commands(args)
        result = app(args=args, prog_name="maskcheck", standalone_mode=False)
    except SystemExit as e:  # typer.Exit inside callbacks
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else 2
    except UsageError as e:
        print(f"maskcheck: error: {e}", file=sys.stderr)
        return 2
    except MaskcheckError as e:
        print(f"maskcheck: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("maskcheck: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        import click

        if isinstance(e, click.exceptions.Exit):
            return int(e.exit_code)
        if isinstance(e, click.ClickException):
            e.show()
            return 2
        if isinstance(e, click.exceptions.Abort):
            return 130
        if debug:
            traceback.print_exc()
        else:
            print(
                f"maskcheck: internal error: {type(e).__name__}: {e} "
                "(this is a bug; rerun with --debug for the traceback)",
                file=sys.stderr,
            )
        return 3
    return int(result or 0)
