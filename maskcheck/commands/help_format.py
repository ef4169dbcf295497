"""Help text that shows metavars (`PATH...`, `N`), never Python types (`<list[Path]>`).

One command class for every command, set by `cli.build_app` on whatever was registered, so a
command added later gets the same help without repeating anything in its option list.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand


def argument_label(param: Any) -> str:
    """`PATH...` for a required list, `[PATH]` for an optional one-value argument."""
    name = param.metavar or param.name.upper()
    name = name + "..." if param.nargs != 1 else name
    return name if param.required else f"[{name}]"


class MetavarCommand(TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            # An option that takes a value and has no metavar: its name, upper case (`--dim
            # DIM`), where Typer would print the Python type (`--dim <int range>`).
            if (param.param_type_name == "option" and param.metavar is None
                    and not getattr(param, "is_flag", False) and param.name):
                param.metavar = param.name.upper()

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [argument_label(p) for p in self.get_params(ctx)
                         if p.param_type_name == "argument"]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                arguments.append((argument_label(param), getattr(param, "help", None) or ""))
            elif (record := param.get_help_record(ctx)) is not None:
                options.append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)
