"""Command options declared once, without Typer; parsed by argparse or by Typer.

Running a Typer app builds its parameters through pydantic (typer._adapters), and importing
Typer itself costs more than `inspect` of a small file. So a command declares its options
with `Arg`/`Opt` in `Annotated` hints; `run_with_argparse` parses them with argparse (the
fast path, no Typer imported) and `typer_command` turns the same declarations into a Typer
command for `-h` and the full app. Parse errors raise UsageError(command=...): the one
argument-error style of every command.
"""

from __future__ import annotations

import argparse
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from maskcheck.errors import UsageError


@dataclass(frozen=True)
class Arg:
    metavar: str
    help: str


@dataclass(frozen=True)
class Opt:
    decls: tuple[str, ...]
    metavar: str | None = None
    help: str = ""
    min: int | None = None

    def __init__(self, *decls: str, metavar: str | None = None, help: str = "",
                 min: int | None = None) -> None:
        object.__setattr__(self, "decls", decls)
        object.__setattr__(self, "metavar", metavar)
        object.__setattr__(self, "help", help)
        object.__setattr__(self, "min", min)


@dataclass(frozen=True)
class Param:
    name: str
    base: Any  # the type, Optional stripped
    spec: Arg | Opt
    default: Any  # inspect.Parameter.empty when required

    @property
    def many(self) -> bool:
        return typing.get_origin(self.base) is list

    @property
    def item(self) -> Any:
        return typing.get_args(self.base)[0] if self.many else self.base


def params(fn: Callable[..., Any]) -> list[Param]:
    hints = typing.get_type_hints(fn, include_extras=True)
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        base, *extras = typing.get_args(hints[name])
        spec = next(e for e in extras if isinstance(e, (Arg, Opt)))
        out.append(Param(name, _strip_optional(base), spec, p.default))
    return out


def _strip_optional(t: Any) -> Any:
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return t


# ---------------------------------------------------------------------------- argparse


class _Parser(argparse.ArgumentParser):
    def __init__(self, command: str) -> None:
        super().__init__(prog=f"maskcheck {command}", add_help=False, allow_abbrev=False)
        self.command = command

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, command=self.command)


def build_parser(command: str, fn: Callable[..., Any]) -> argparse.ArgumentParser:
    parser = _Parser(command)
    for p in params(fn):
        convert = {int: int, float: float, Path: Path}.get(p.item, str)
        if isinstance(p.spec, Arg):
            parser.add_argument(p.name, nargs="+" if p.many else None, type=convert,
                                metavar=p.spec.metavar)
        elif p.item is bool:
            parser.add_argument(*p.spec.decls, dest=p.name, action="store_true",
                                default=bool(p.default))
        elif p.many:
            parser.add_argument(*p.spec.decls, dest=p.name, type=convert,
                                metavar=p.spec.metavar, action="append", default=[])
        else:
            parser.add_argument(*p.spec.decls, dest=p.name, type=convert,
                                metavar=p.spec.metavar, default=p.default)
    return parser


def run_with_argparse(command: str, fn: Callable[..., int], args: Sequence[str]) -> int:
    values = vars(build_parser(command, fn).parse_args(list(args)))
    for p in params(fn):
        if not isinstance(p.spec, Opt) or p.spec.min is None:
            continue
        value = values[p.name]
        if value is not None and value < p.spec.min:
            raise UsageError(f"{p.spec.decls[0]} takes a number >= {p.spec.min}, not {value}",
                             command=command)
    return fn(**values)


# ------------------------------------------------------------------------------- Typer


def typer_command(fn: Callable[..., int]) -> Callable[..., int]:
    """`fn` with Typer declarations (default style) made from its Arg/Opt hints."""
    import typer

    parameters = []
    annotations: dict[str, Any] = {}
    for p in params(fn):
        typ = p.base if p.default is not None or p.many else p.base | None
        if isinstance(p.spec, Arg):
            info = typer.Argument(..., metavar=p.spec.metavar, help=p.spec.help)
        else:
            default = [] if p.many else p.default
            info = typer.Option(default, *p.spec.decls, metavar=p.spec.metavar,
                                help=p.spec.help, min=p.spec.min)
        annotations[p.name] = typ
        parameters.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY,
                                            default=info, annotation=typ))

    def command(**kwargs: Any) -> int:
        return fn(**kwargs)

    command.__name__ = fn.__name__
    command.__doc__ = fn.__doc__
    command.__annotations__ = annotations
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return command
